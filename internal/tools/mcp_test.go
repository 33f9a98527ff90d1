package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/jetloop/jetloop/internal/tools"
	"github.com/jetloop/jetloop/worker"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpBin is the path of an MCP server installed by make test from
// testdata/mcp's lock file. Without it the test skips, or fails in CI.
func mcpBin(t *testing.T, name string) string {
	t.Helper()
	path, err := filepath.Abs(filepath.Join("testdata", "mcp", "node_modules", ".bin", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		msg := fmt.Sprintf("the MCP server %s is not installed (%v): run make mcp-servers "+
			"(npm ci --prefix internal/tools/testdata/mcp)", name, err)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return path
}

func everything(t *testing.T) tools.MCPServer {
	return tools.MCPServer{Name: "everything", Command: []string{mcpBin(t, "mcp-server-everything"), "stdio"}}
}

func filesystem(t *testing.T, dir string) tools.MCPServer {
	return tools.MCPServer{Name: "fs", Command: []string{mcpBin(t, "mcp-server-filesystem"), dir}}
}

func testLog(t *testing.T) *slog.Logger {
	return testkit.LoggerAt(t, slog.LevelDebug)
}

// startMCP starts a bridge closed when the test ends and returns its tools
// by name.
func startMCP(t *testing.T, servers ...tools.MCPServer) (*tools.MCP, map[string]tools.Tool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := tools.NewMCP(ctx, testLog(t), servers)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	byName := map[string]tools.Tool{}
	for _, tool := range m.Tools() {
		byName[tool.Spec().Name] = tool
	}
	return m, byName
}

func callMCP(t *testing.T, byName map[string]tools.Tool, name, args string) tools.Result {
	t.Helper()
	tool, ok := byName[name]
	if !ok {
		t.Fatalf("no tool %s", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := tool.Call(ctx, json.RawMessage(args))
	if err != nil {
		t.Fatalf("%s %s: %v", name, args, err)
	}
	return res
}

func TestParseMCPServer(t *testing.T) {
	for _, tc := range []struct {
		flag    string
		want    []string
		wantErr string
	}{
		{flag: "fs=npx -y server /tmp", want: []string{"npx", "-y", "server", "/tmp"}},
		{flag: "a_b-1=  node   index.js  ", want: []string{"node", "index.js"}},
		{flag: `x=run 'two words' "say \"hi\" \\ $HOME" a\ b ''`, want: []string{"run", "two words", `say "hi" \ $HOME`, "a b", ""}},
		{flag: `x=sh -c 'echo a | cat'`, want: []string{"sh", "-c", "echo a | cat"}},
		{flag: "x=a=b c", want: []string{"a=b", "c"}},
		{flag: "no-command", wantErr: "want NAME=COMMAND"},
		{flag: "=cmd", wantErr: "the name must be"},
		{flag: "a.b=cmd", wantErr: "the name must be"},
		{flag: strings.Repeat("n", 33) + "=cmd", wantErr: "the name must be"},
		{flag: "x=   ", wantErr: "the command is empty"},
		{flag: "x=run 'open", wantErr: "unterminated ' quote"},
		{flag: `x=run "open`, wantErr: `unterminated " quote`},
		{flag: `x=run \`, wantErr: "ends with a backslash"},
	} {
		got, err := tools.ParseMCPServer(tc.flag)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: err = %v, want %q", tc.flag, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got.Command, tc.want) {
			t.Errorf("%q = %q (%v), want %q", tc.flag, got.Command, err, tc.want)
		}
	}
}

func TestMCPToolName(t *testing.T) {
	for _, tc := range []struct{ server, tool, want string }{
		{"fs", "read_file", "fs__read_file"},
		{"everything", "get-sum", "everything__get-sum"},
		{"web", "fetch.url v2", "web__fetch_url_v2"},
		{"x", "a>b*c", "x__a_b_c"},
		{"x", "größe", "x__gr__e"},
		{"x", strings.Repeat("t", 100), "x__" + strings.Repeat("t", 61)},
	} {
		got := tools.MCPToolName(tc.server, tc.tool)
		if got != tc.want || !events.ValidID(got) {
			t.Errorf("MCPToolName(%q, %q) = %q, want %q", tc.server, tc.tool, got, tc.want)
		}
	}
}

func TestMCPResultsBecomeText(t *testing.T) {
	for _, tc := range []struct {
		name string
		res  mcp.CallToolResult
		want tools.Result
	}{
		{"text blocks joined", mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "a"}, &mcp.TextContent{Text: "b"}}},
			tools.Result{Output: "a\nb"}},
		{"error", mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "no such file"}}, IsError: true},
			tools.Result{Output: "no such file", IsError: true}},
		{"structured content added", mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "It is cloudy."}},
			StructuredContent: map[string]any{"temperature": 21.5, "conditions": "cloudy"}},
			tools.Result{Output: "It is cloudy.\n" + `{"conditions":"cloudy","temperature":21.5}`}},
		{"structured content alone", mcp.CallToolResult{StructuredContent: []any{1.0, "two"}},
			tools.Result{Output: `[1,"two"]`}},
		{"structured content repeated as JSON", mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: `{ "a": [1, true] }`}},
			StructuredContent: map[string]any{"a": []any{1.0, true}}},
			tools.Result{Output: `{ "a": [1, true] }`}},
		{"structured content repeated in words", mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello\n"}},
			StructuredContent: map[string]any{"content": "hello\n"}},
			tools.Result{Output: "hello\n"}},
		{"other content summarized", mcp.CallToolResult{Content: []mcp.Content{
			&mcp.ImageContent{MIMEType: "image/png", Data: make([]byte, 10)},
			&mcp.AudioContent{MIMEType: "audio/wav", Data: make([]byte, 3)},
			&mcp.ResourceLink{Name: "readme", URI: "file:///README.md"},
			&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "demo://t", Text: "inline"}},
			&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "demo://b", MIMEType: "application/gzip", Blob: make([]byte, 7)}},
		}}, tools.Result{Output: "[image: image/png, 10 bytes]\n[audio: audio/wav, 3 bytes]\n[resource link: readme file:///README.md]\n" +
			"[resource: demo://t]\ninline\n[resource: demo://b, application/gzip, 7 bytes]"}},
	} {
		if got := tools.MCPResult(&tc.res); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestMCPEverything runs the tools of the reference server that exercises
// every feature of the protocol.
func TestMCPEverything(t *testing.T) {
	m, byName := startMCP(t, everything(t))
	echo, ok := byName["everything__echo"]
	if !ok {
		t.Fatalf("tools %v lack everything__echo", keys(byName))
	}
	spec := echo.Spec()
	var params struct {
		Properties map[string]any
		Required   []string
	}
	if err := json.Unmarshal(spec.Parameters, &params); err != nil || params.Properties["message"] == nil ||
		!reflect.DeepEqual(params.Required, []string{"message"}) || spec.Description == "" {
		t.Fatalf("echo's spec %+v (%v)", spec, err)
	}
	if r := callMCP(t, byName, "everything__echo", `{"message":"hi"}`); r != (tools.Result{Output: "Echo: hi"}) {
		t.Errorf("echo: %+v", r)
	}
	if r := callMCP(t, byName, "everything__get-sum", `{"a":2,"b":40}`); r.IsError || !strings.Contains(r.Output, "42") {
		t.Errorf("get-sum: %+v", r)
	}
	// Arguments the server refuses (the worker validates them first; here
	// the server does): an error result, not an error.
	if r := callMCP(t, byName, "everything__get-sum", `{"a":"two"}`); !r.IsError || !strings.Contains(r.Output, "a") {
		t.Errorf("get-sum with bad arguments: %+v", r)
	}
	// The server repeats its structured content as JSON text: said once.
	r := callMCP(t, byName, "everything__get-structured-content", `{"location":"Chicago"}`)
	var weather struct{ Temperature, Humidity *float64 }
	if r.IsError || json.Unmarshal([]byte(r.Output), &weather) != nil || weather.Temperature == nil || weather.Humidity == nil {
		t.Errorf("get-structured-content: %+v", r)
	}
	if r := callMCP(t, byName, "everything__get-tiny-image", `{}`); r.IsError || !strings.Contains(r.Output, "[image: image/png, ") {
		t.Errorf("get-tiny-image: %+v", r)
	}

	// Close stops the server and reaps it; later calls get an error result.
	pid := tools.MCPPid(m, "everything")
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("server %d after Close: %v", pid, err)
	}
	if r := callMCP(t, byName, "everything__echo", `{"message":"late"}`); !r.IsError || !strings.Contains(r.Output, "stopped") {
		t.Errorf("a call after Close: %+v", r)
	}
}

func TestMCPFilesystem(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("jetloop\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, byName := startMCP(t, filesystem(t, dir))
	if r := callMCP(t, byName, "fs__list_directory", fmt.Sprintf(`{"path":%q}`, dir)); r.IsError || r.Output != "[FILE] notes.txt" {
		t.Errorf("list_directory: %+v", r)
	}
	if r := callMCP(t, byName, "fs__read_text_file", fmt.Sprintf(`{"path":%q}`, filepath.Join(dir, "notes.txt"))); r != (tools.Result{Output: "jetloop\n"}) {
		t.Errorf("read_text_file: %+v", r)
	}
	if r := callMCP(t, byName, "fs__read_text_file", `{"path":"/etc/hostname"}`); !r.IsError || !strings.Contains(r.Output, "denied") {
		t.Errorf("a read outside the server's directory: %+v", r)
	}
}

// TestMCPServerIsRestartedAfterItDies kills the real server's process: the
// bridge starts it again and its tools serve again.
func TestMCPServerIsRestartedAfterItDies(t *testing.T) {
	m, byName := startMCP(t, everything(t))
	pid := tools.MCPPid(m, "everything")
	if pid == 0 {
		t.Fatal("no server process")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the server to be restarted", func() bool {
		next := tools.MCPPid(m, "everything")
		return next != 0 && next != pid
	})
	if r := callMCP(t, byName, "everything__echo", `{"message":"again"}`); r != (tools.Result{Output: "Echo: again"}) {
		t.Errorf("echo after a restart: %+v", r)
	}
}

// TestMCPToolsThroughTheWorker serves MCP tools with a worker: the registry
// has their schemas, the worker checks arguments against them, and jobs get
// the server's answers.
func TestMCPToolsThroughTheWorker(t *testing.T) {
	e := newEnv(t)
	m, _ := startMCP(t, everything(t))
	e.worker(m.Tools(), worker.WithName("w1"))
	info := e.info("everything__get-sum")
	if info == nil || !strings.Contains(string(info.Parameters), `"required":["a","b"]`) || info.Workers != 1 {
		t.Fatalf("registry entry %+v", info)
	}
	e.job(job("m1", "everything__get-sum", `{"a":1,"b":2}`))
	if r := e.result("m1"); r.IsError || !strings.Contains(r.Output, "3") || r.Tool != "everything__get-sum" {
		t.Errorf("get-sum through the worker: %+v", r)
	}
	e.job(job("m2", "everything__get-sum", `{"a":1}`))
	if r := e.result("m2"); !r.IsError || !strings.Contains(r.Output, "invalid arguments") {
		t.Errorf("missing argument: %+v", r)
	}
}

// TestMCPHelperServer is not a test: run as a child with
// JETLOOP_MCP_HELPER=1, it is an MCP server whose tools misbehave on
// purpose, which the real servers do not do on demand.
func TestMCPHelperServer(t *testing.T) {
	if os.Getenv("JETLOOP_MCP_HELPER") != "1" {
		t.Skip("an MCP server for the other tests")
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "helper", Version: "1"}, nil)
	type text struct {
		Text string `json:"text"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Echoes."}, func(_ context.Context, _ *mcp.CallToolRequest, in text) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "die", Description: "Exits mid-call."}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		os.Exit(3)
		return nil, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "drop", Description: "Removes echo."}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		s.RemoveTools("echo")
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "dropped"}}}, nil, nil
	})
	// Tools the bridge leaves out: two whose jetloop names collide, and one
	// whose schema is draft-07 only (a tuple "items" array).
	say := func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, nil
	}
	s.AddTool(&mcp.Tool{Name: "a.b", InputSchema: json.RawMessage(`{"type":"object"}`)}, say)
	s.AddTool(&mcp.Tool{Name: "a_b", InputSchema: json.RawMessage(`{"type":"object"}`)}, say)
	s.AddTool(&mcp.Tool{Name: "odd", InputSchema: json.RawMessage(
		`{"type":"object","properties":{"pair":{"type":"array","items":[{"type":"string"},{"type":"number"}]}}}`)}, say)
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func helper(t *testing.T) tools.MCPServer {
	t.Setenv("JETLOOP_MCP_HELPER", "1")
	return tools.MCPServer{Name: "h", Command: []string{os.Args[0], "-test.run=^TestMCPHelperServer$"}}
}

// TestMCPToolsLeftOut: tools whose names collide once mapped, or whose
// schema the registry would refuse, are not served; the others are.
func TestMCPToolsLeftOut(t *testing.T) {
	_, byName := startMCP(t, helper(t))
	got := keys(byName)
	slices.Sort(got)
	if want := []string{"h__die", "h__drop", "h__echo"}; !slices.Equal(got, want) {
		t.Errorf("tools %v, want %v", got, want)
	}
}

// TestMCPServerDyingMidCall: the call gets an error result, the server is
// restarted, and the next call is served.
func TestMCPServerDyingMidCall(t *testing.T) {
	m, byName := startMCP(t, helper(t))
	pid := tools.MCPPid(m, "h")
	if r := callMCP(t, byName, "h__die", `{}`); !r.IsError || !strings.Contains(r.Output, "h__die: MCP error") {
		t.Errorf("a call whose server died: %+v", r)
	}
	// The call waits for the restart rather than failing at once.
	if r := callMCP(t, byName, "h__echo", `{"text":"back"}`); r != (tools.Result{Output: "back"}) {
		t.Errorf("echo after the restart: %+v", r)
	}
	if next := tools.MCPPid(m, "h"); next == pid || next == 0 {
		t.Errorf("pid %d after the restart, %d before", next, pid)
	}
}

// TestMCPToolRemovedByTheServer: after notifications/tools/list_changed the
// bridge lists the tools again, and a call of a tool that is gone gets an
// error result that says so.
func TestMCPToolRemovedByTheServer(t *testing.T) {
	_, byName := startMCP(t, helper(t))
	if r := callMCP(t, byName, "h__drop", `{}`); r.Output != "dropped" {
		t.Fatalf("drop: %+v", r)
	}
	testkit.WaitFor(t, "echo to be gone", func() bool {
		r := callMCP(t, byName, "h__echo", `{"text":"x"}`)
		return r.IsError && strings.Contains(r.Output, `no longer has the tool "echo"`)
	})
}

// TestMCPServerThatCannotStart fails the bridge with the server's words.
func TestMCPServerThatCannotStart(t *testing.T) {
	_, err := tools.NewMCP(context.Background(), testLog(t), []tools.MCPServer{
		{Name: "bad", Command: []string{"sh", "-c", "echo no config here >&2; exit 1"}}})
	if err == nil || !strings.Contains(err.Error(), "start MCP server bad") {
		t.Fatalf("err = %v", err)
	}
	_, err = tools.NewMCP(context.Background(), testLog(t), []tools.MCPServer{
		{Name: "gone", Command: []string{filepath.Join(t.TempDir(), "missing")}}})
	if err == nil {
		t.Fatal("a missing command started")
	}
}

func keys(m map[string]tools.Tool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
