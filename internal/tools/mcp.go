package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jetloop/jetloop/internal/backoff"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/schemas"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sync/errgroup"
)

// The MCP bridge's timing. A server that dies is restarted after a backoff
// that starts at mcpMinBackoff and doubles with every start that fails or
// does not last mcpStable, up to mcpMaxBackoff: a server that crashes at
// once costs at most one start every 30 s.
const (
	mcpStartTimeout = 30 * time.Second
	mcpRestartWait  = 10 * time.Second
	mcpMinBackoff   = 100 * time.Millisecond
	mcpMaxBackoff   = 30 * time.Second
	mcpStable       = time.Minute
	mcpTerminate    = 2 * time.Second
	mcpStderrTail   = 2 << 10
	// ioTimeout bounds listing a server's tools again.
	ioTimeout = 5 * time.Second
)

// errMCPStopped answers calls that arrive after Close.
var errMCPStopped = errors.New("tools: the MCP bridge is stopped")

// MCP serves the tools of MCP servers as jetloop tools. Each server runs as
// a child process spoken to over stdio; a server that dies is restarted
// with a bounded backoff, and the calls that arrive while it is down wait
// up to 10 s for it before they get an error result.
//
// The set of tools is fixed when the bridge starts: after a restart or a
// notifications/tools/list_changed, the bridge lists the server's tools
// again, calls of a tool the server no longer has get an error result, and
// a new tool is logged and served from the worker's next start.
//
// MCP is a resource rather than a Run(ctx) component because its servers
// must outlive the worker's drain: close it after the worker's Run returns.
type MCP struct {
	servers []*mcpServer
	tools   []Tool
}

// NewMCP starts every server, in parallel, and lists its tools. It fails
// when a server does not start and answer within 30 s (or ctx's deadline).
func NewMCP(ctx context.Context, log *slog.Logger, servers []MCPServer) (*MCP, error) {
	m := &MCP{}
	seen := map[string]bool{}
	for _, spec := range servers {
		if !validServerName.MatchString(spec.Name) || len(spec.Command) == 0 {
			return nil, fmt.Errorf("tools: MCP server %q (%q): want a name of [A-Za-z0-9_-]{1,32} and a command", spec.Name, spec.Command)
		}
		if seen[spec.Name] {
			return nil, fmt.Errorf("tools: MCP server %s given twice", spec.Name)
		}
		seen[spec.Name] = true
		m.servers = append(m.servers, newMCPServer(spec, log.With("mcp", spec.Name)))
	}
	sessions := make([]*mcp.ClientSession, len(m.servers))
	g, gctx := errgroup.WithContext(ctx)
	for i, s := range m.servers {
		g.Go(func() error {
			sctx, cancel := context.WithTimeout(gctx, mcpStartTimeout)
			defer cancel()
			sess, err := s.start(sctx)
			sessions[i] = sess
			return err
		})
	}
	if err := g.Wait(); err != nil {
		for i, s := range m.servers {
			if sessions[i] != nil {
				_ = sessions[i].Close()
				s.killGroup()
			}
			s.cancel()
		}
		return nil, err
	}
	m.tools = mcpTools(log, m.servers)
	for i, s := range m.servers {
		s.wg.Go(func() { s.supervise(sessions[i]) })
	}
	return m, nil
}

// Tools returns the servers' tools, named as MCPToolName says.
func (m *MCP) Tools() []Tool { return slices.Clone(m.tools) }

// Close stops every server: it closes the server's stdin, then sends
// SIGTERM after 2 s and SIGKILL after 2 s more, and waits for it.
func (m *MCP) Close() error {
	for _, s := range m.servers {
		s.cancel()
	}
	for _, s := range m.servers {
		s.wg.Wait()
	}
	return nil
}

// mcpTools makes the jetloop tools of the servers' tools, leaving out (with
// a warning) tools whose names collide and tools whose schema does not
// compile, so one odd tool does not keep the others from being served.
func mcpTools(log *slog.Logger, servers []*mcpServer) []Tool {
	byName := map[string][]*mcpTool{}
	var names []string
	for _, s := range servers {
		for _, remote := range slices.Sorted(maps.Keys(s.remote)) {
			t := s.remote[remote]
			name := MCPToolName(s.spec.Name, remote)
			if _, ok := byName[name]; !ok {
				names = append(names, name)
			}
			byName[name] = append(byName[name], &mcpTool{server: s, remote: remote, spec: mcpSpec(name, t)})
		}
	}
	var out []Tool
	for _, name := range names {
		ts := byName[name]
		if len(ts) > 1 {
			var which []string
			for _, t := range ts {
				which = append(which, t.server.spec.Name+"/"+t.remote)
			}
			log.Warn("MCP tools share one jetloop name; none of them is served", "name", name, "tools", which)
			continue
		}
		t := ts[0]
		if err := checkSpec(t.spec); err != nil {
			t.server.log.Warn("MCP tool not served: its input schema is not one jetloop can use", "tool", t.remote, "err", err)
			continue
		}
		t.server.served[t.remote] = true
		out = append(out, t)
	}
	return out
}

// checkSpec checks that a worker can validate the tool's arguments and that
// orchestrators accept its registry entry (a draft 2020-12 schema; a
// draft-07 tuple "items" array, say, is not one).
func checkSpec(spec events.ToolSpec) error {
	if err := schemas.CheckParameters(spec.Parameters); err != nil {
		return err
	}
	info, err := json.Marshal(events.ToolInfo{Name: spec.Name, Description: spec.Description, Parameters: spec.Parameters, Workers: 1})
	if err != nil {
		return err
	}
	return schemas.Validate("tool_info", info)
}

func mcpSpec(name string, t *mcp.Tool) events.ToolSpec {
	desc := t.Description
	if desc == "" {
		desc = t.Title
	}
	params, err := json.Marshal(t.InputSchema)
	if err != nil || string(params) == "null" {
		params = json.RawMessage(`{"type":"object"}`)
	}
	return events.ToolSpec{Name: name, Description: desc, Parameters: params}
}

// mcpTool is one tool of an MCP server.
type mcpTool struct {
	server *mcpServer
	remote string
	spec   events.ToolSpec
}

func (t *mcpTool) Spec() events.ToolSpec { return t.spec }

// Call forwards a call to the server. Every failure of the server or of the
// protocol is an error result the model can read; only a call cut short by
// its context returns an error.
func (t *mcpTool) Call(ctx context.Context, args json.RawMessage) (Result, error) {
	params := &mcp.CallToolParams{Name: t.remote}
	if len(args) > 0 {
		params.Arguments = args
	}
	for try := 1; ; try++ {
		sess, err := t.server.await(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return Result{}, ctx.Err()
			}
			return Result{Output: fmt.Sprintf("%s: %v", t.spec.Name, err), IsError: true}, nil
		}
		if !t.server.has(t.remote) {
			return Result{Output: fmt.Sprintf("%s: the MCP server %s no longer has the tool %q", t.spec.Name, t.server.spec.Name, t.remote), IsError: true}, nil
		}
		res, err := sess.CallTool(ctx, params)
		switch {
		case err == nil:
			return mcpResult(res), nil
		case ctx.Err() != nil:
			return Result{}, ctx.Err()
		case try == 1 && unsent(err):
			// The server died before the call could be sent: it did not
			// run, so it waits for the restart like a call that came later.
			t.server.lost(sess)
			continue
		}
		// A call in flight when its server died may or may not have run:
		// it is not repeated behind the model's back.
		return Result{Output: fmt.Sprintf("%s: MCP error: %v", t.spec.Name, err), IsError: true}, nil
	}
}

// unsent reports whether a call failed because its connection was already
// broken when it was made, so nothing was sent. The SDK says so only in the
// text of the error it wraps (jsonrpc2's ErrClientClosing); the tests
// notice when that changes.
func unsent(err error) bool {
	return errors.Is(err, mcp.ErrConnectionClosed) && strings.Contains(err.Error(), "client is closing")
}

// mcpServer is one supervised MCP server process.
type mcpServer struct {
	spec   MCPServer
	log    *slog.Logger
	client *mcp.Client
	relist chan struct{}
	stop   context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// served holds the tools the bridge serves; written once before any
	// call, read only afterwards.
	served map[string]bool

	mu      sync.Mutex
	session *mcp.ClientSession // nil while the server is down
	up      chan struct{}      // closed when session is set
	cmd     *exec.Cmd
	stderr  *stderrLog
	remote  map[string]*mcp.Tool // the server's tools as last listed
}

func newMCPServer(spec MCPServer, log *slog.Logger) *mcpServer {
	s := &mcpServer{spec: spec, log: log, relist: make(chan struct{}, 1), up: make(chan struct{}), served: map[string]bool{}}
	s.stop, s.cancel = context.WithCancel(context.Background())
	s.client = mcp.NewClient(&mcp.Implementation{Name: "jetloop-toolworker", Version: "1"}, &mcp.ClientOptions{
		// The bridge offers no roots, sampling or elicitation: a tool call
		// has no user or model to ask.
		Capabilities: &mcp.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			// Listing again from inside the handler would block the
			// connection that delivers the answer: hand it to supervise.
			select {
			case s.relist <- struct{}{}:
			default:
			}
		},
	})
	return s
}

// start starts the process, opens the session, lists the tools and marks
// the server up.
func (s *mcpServer) start(ctx context.Context) (*mcp.ClientSession, error) {
	cmd := exec.Command(s.spec.Command[0], s.spec.Command[1:]...)
	stderr := &stderrLog{log: s.log}
	cmd.Stderr = stderr
	ownGroup(cmd)
	// A grandchild holding stderr open must not keep Wait from returning.
	cmd.WaitDelay = mcpTerminate
	sess, err := s.client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: mcpTerminate}, nil)
	if err != nil {
		// The SDK stops the process it started, not what that process
		// started in turn (the node behind an npx, a sh -c's children):
		// without this, every start that hangs leaves them running.
		killGroup(cmd)
		return nil, fmt.Errorf("tools: start MCP server %s (%q): %w%s", s.spec.Name, s.spec.Command, err, stderr.suffix())
	}
	remote, err := listTools(ctx, sess)
	if err != nil {
		_ = sess.Close()
		killGroup(cmd)
		return nil, fmt.Errorf("tools: list the tools of MCP server %s: %w%s", s.spec.Name, err, stderr.suffix())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.session, s.cmd, s.stderr, s.remote = sess, cmd, stderr, remote
	close(s.up)
	s.log.Info("MCP server up", "pid", cmd.Process.Pid, "tools", len(remote))
	return sess, nil
}

func listTools(ctx context.Context, sess *mcp.ClientSession) (map[string]*mcp.Tool, error) {
	out := map[string]*mcp.Tool{}
	for t, err := range sess.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		out[t.Name] = t
	}
	return out, nil
}

// lost marks the server down when sess is still its session, so that calls
// wait for the next start. A call that finds the session broken may say so
// before the supervisor does.
func (s *mcpServer) lost(sess *mcp.ClientSession) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.session == sess {
		s.session, s.up = nil, make(chan struct{})
	}
}

// await returns the live session, waiting up to mcpRestartWait for a server
// that is restarting.
func (s *mcpServer) await(ctx context.Context) (*mcp.ClientSession, error) {
	timer := time.NewTimer(mcpRestartWait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		sess, up := s.session, s.up
		s.mu.Unlock()
		if s.stop.Err() != nil {
			return nil, errMCPStopped
		}
		if sess != nil {
			return sess, nil
		}
		select {
		case <-up:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.stop.Done():
			return nil, errMCPStopped
		case <-timer.C:
			return nil, fmt.Errorf("the MCP server %s is down and did not come back within %s", s.spec.Name, mcpRestartWait)
		}
	}
}

func (s *mcpServer) has(remote string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.remote[remote]
	return ok
}

// supervise watches a running server until Close: it lists the tools again
// when the server says they changed, and restarts the server when it dies.
func (s *mcpServer) supervise(sess *mcp.ClientSession) {
	failures := 0
	for {
		began := time.Now()
		died := make(chan struct{})
		go func() { _ = sess.Wait(); close(died) }()
	watch:
		for {
			select {
			case <-s.stop.Done():
				s.lost(sess)
				if err := sess.Close(); err != nil {
					s.log.Debug("MCP server stopped", "err", err)
				}
				<-died
				s.killGroup()
				return
			case <-s.relist:
				s.refresh(sess)
			case <-died:
				break watch
			}
		}
		s.lost(sess)
		err := sess.Close() // reaps the process
		s.killGroup()
		s.mu.Lock()
		tail := s.stderr.String()
		s.mu.Unlock()
		s.log.Warn("MCP server exited; restarting it", "err", err, "stderr", tail)
		if time.Since(began) >= mcpStable {
			failures = 0
		}
		for {
			delay := min(mcpMinBackoff<<min(failures, 20), mcpMaxBackoff)
			failures++
			if !backoff.Sleep(s.stop, delay) {
				return
			}
			ctx, cancel := context.WithTimeout(s.stop, mcpStartTimeout)
			next, err := s.start(ctx)
			cancel()
			if err == nil {
				s.changes()
				sess = next
				break
			}
			if s.stop.Err() != nil {
				return
			}
			s.log.Warn("cannot restart MCP server", "err", err)
		}
	}
}

func (s *mcpServer) killGroup() {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	killGroup(cmd)
}

// refresh lists the tools again after the server said they changed.
func (s *mcpServer) refresh(sess *mcp.ClientSession) {
	ctx, cancel := context.WithTimeout(s.stop, ioTimeout)
	defer cancel()
	remote, err := listTools(ctx, sess)
	if err != nil {
		s.log.Warn("cannot list the changed tools; keeping the last list", "err", err)
		return
	}
	s.mu.Lock()
	s.remote = remote
	s.mu.Unlock()
	s.changes()
}

// changes logs how the server's tools differ from the served ones.
func (s *mcpServer) changes() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range s.served {
		if _, ok := s.remote[name]; !ok {
			s.log.Warn("MCP server no longer has a tool; its calls get an error result", "tool", name)
		}
	}
	for name := range s.remote {
		if !s.served[name] {
			s.log.Info("MCP server has a tool the worker does not serve; restart the worker to serve it", "tool", name)
		}
	}
}

// stderrLog logs a server's stderr at debug level, line by line, and keeps
// its last bytes to show when the server dies.
type stderrLog struct {
	log  *slog.Logger
	mu   sync.Mutex
	line []byte
	tail []byte
}

func (w *stderrLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tail = append(w.tail, p...)
	if len(w.tail) > mcpStderrTail {
		w.tail = w.tail[len(w.tail)-mcpStderrTail:]
	}
	w.line = append(w.line, p...)
	for {
		i := bytes.IndexByte(w.line, '\n')
		if i < 0 {
			break
		}
		w.log.Debug("MCP server stderr", "line", string(w.line[:i]))
		w.line = w.line[i+1:]
	}
	// A server that writes without newlines (progress bars redrawn with
	// \r, binary) must not grow the pending line for ever.
	if len(w.line) > mcpStderrTail {
		w.log.Debug("MCP server stderr", "line", string(w.line))
		w.line = w.line[:0]
	}
	return len(p), nil
}

// String returns the last bytes the server wrote to stderr.
func (w *stderrLog) String() string {
	if w == nil {
		return ""
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(bytes.TrimSpace(w.tail))
}

func (w *stderrLog) suffix() string {
	if s := w.String(); s != "" {
		return "; stderr: " + s
	}
	return ""
}
