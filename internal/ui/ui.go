package ui

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/jetloop/jetloop/client"
	"io/fs"
	"mime"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/timeline"
	"github.com/jetloop/jetloop/internal/turnlog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The web view's pages, script and style are files in the binary: no build
// step, nothing fetched from anywhere else. The timeline is drawn by the
// same script and style as the page of replay --html.
//
//go:embed assets
var assets embed.FS

// uiHeader is the header every control request must carry. A page of
// another site can make the browser send a form or a simple fetch to this
// server, but not with a custom header: that needs a CORS preflight, which
// this server never answers with an allow.
const uiHeader = "X-Jetloop-Ui"

// uiCSP lets the pages run only the scripts and styles this server serves:
// no inline script or style attribute, no other origin, no framing. Text
// from a log that slipped into the markup would still not run.
const uiCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Server is the web view: pages and server-sent events read from the
// streams with its connection, and controls sent with it. New makes one,
// AsyncErr must be its connection's error handler, Start binds it to the
// connection, and Serve or Handler serves it.
type Server struct {
	nc *nats.Conn
	js jetstream.JetStream
	// cl reads logs and sends control messages; lister lists the logs of
	// the turns page, by subject.
	cl     *client.Client
	lister *turnlog.Lister
	dead   jetstream.Stream
	// anyHost accepts requests for any host name: set when the server is
	// bound to other than loopback. On loopback, only loopback names are
	// served, so a site whose name an attacker points at 127.0.0.1 (DNS
	// rebinding) gets nothing.
	anyHost bool

	canControl, canSubmit atomic.Bool
	// denials receives the subjects of publishes the server refused, as the
	// connection's error handler reports them.
	denials chan string
	cop     *http.CrossOriginProtection
}

// New returns a server to bind with Start.
func New() *Server {
	return &Server{denials: make(chan string, 16), cop: http.NewCrossOriginProtection()}
}

// AsyncErr is the connection's error handler: a refused publish is how the
// server says these credentials may not do something.
func (u *Server) AsyncErr(err error) {
	msg := err.Error()
	i := strings.Index(strings.ToLower(msg), `publish to "`)
	if i < 0 {
		return
	}
	subj, _, _ := strings.Cut(msg[i+len(`publish to "`):], `"`)
	if strings.HasPrefix(subj, "jetloop.inbox.control.") {
		u.canControl.Store(false)
	}
	select {
	case u.denials <- subj:
	default:
	}
}

// Start binds the streams and finds out what the credentials allow.
func (u *Server) Start(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) error {
	u.nc, u.js = nc, js
	var err error
	if u.cl, err = client.New(nc, client.WithAPIPrefix(js.Options().APIPrefix)); err != nil {
		return err
	}
	if u.lister, err = turnlog.NewLister(ctx, js); err != nil {
		return err
	}
	if u.dead, err = js.Stream(ctx, events.StreamDead); err != nil {
		return fmt.Errorf("%s: %w", events.StreamDead, err)
	}
	u.canControl.Store(u.probe(ctx, events.ControlSubject("ui-probe")))
	u.canSubmit.Store(u.probe(ctx, events.SubjectSubmit))
	return nil
}

// probe reports whether the server lets these credentials publish on
// subject, without storing anything: the message expects a stream that does
// not exist, so JetStream refuses it with an error of its own (it was
// allowed), or the server refuses it as a permissions violation first.
func (u *Server) probe(ctx context.Context, subject string) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for len(u.denials) > 0 {
		<-u.denials
	}
	msg := nats.NewMsg(subject)
	msg.Header.Set(jetstream.ExpectedStreamHeader, "JETLOOP_UI_PROBE")
	msg.Data = []byte("{}")
	res := make(chan error, 1)
	go func() {
		_, err := u.js.PublishMsg(ctx, msg)
		res <- err
	}()
	for {
		select {
		case err := <-res:
			var apiErr *jetstream.APIError
			return errors.As(err, &apiErr)
		case s := <-u.denials:
			if s == subject {
				cancel()
				<-res
				return false
			}
		}
	}
}

// Handler serves the pages and the API to a client on loopback; Serve
// serves them to anyone a listener bound elsewhere lets in.
func (u *Server) Handler() http.Handler {
	static, _ := fs.Sub(assets, "assets")
	mux := http.NewServeMux()
	page := func(name string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			data, err := fs.ReadFile(static, name)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = w.Write(data)
		}
	}
	mux.HandleFunc("GET /{$}", page("turns.html"))
	mux.HandleFunc("GET /turn/{id}", page("turn.html"))
	mux.HandleFunc("GET /workflow/{id}", page("workflow.html"))
	mux.HandleFunc("GET /dead", page("dead.html"))
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /static/timeline.js", asset("text/javascript", timeline.Script))
	mux.HandleFunc("GET /static/timeline.css", asset("text/css", timeline.Style))

	mux.HandleFunc("GET /api/info", u.info)
	mux.HandleFunc("GET /api/turns/live", u.turnsLive)
	mux.HandleFunc("GET /api/turns/{id}/live", u.turnLive)
	mux.HandleFunc("POST /api/turns/{id}/control", u.control)
	mux.HandleFunc("GET /api/workflows/{id}/live", u.workflowLive)
	mux.HandleFunc("GET /api/dead/live", u.deadLive)
	mux.HandleFunc("GET /api/dead/{seq}", u.deadShow)
	mux.HandleFunc("POST /api/dead/{seq}/retry", u.deadRetry)
	return u.guard(mux)
}

func asset(ctype, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ctype+"; charset=utf-8")
		_, _ = w.Write([]byte(body))
	}
}

// guard refuses what a page of another site could make a browser do here,
// and sets the headers that keep the pages to their own scripts.
func (u *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", uiCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		if !u.anyHost && !loopbackHost(r.Host) {
			uiError(w, http.StatusMisdirectedRequest, "this server answers to localhost only, not to %q", r.Host)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if err := u.cop.Check(r); err != nil {
				uiError(w, http.StatusForbidden, "cross-origin request refused")
				return
			}
			if r.Header.Get(uiHeader) != "1" {
				uiError(w, http.StatusForbidden, "a control request needs the %s header", uiHeader)
				return
			}
			if t, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); t != "application/json" {
				uiError(w, http.StatusUnsupportedMediaType, "a control request is JSON")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether a Host header names this machine's loopback.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func uiError(w http.ResponseWriter, code int, format string, a ...any) {
	writeJSON(w, code, map[string]string{"error": fmt.Sprintf(format, a...)})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// Info is what the pages need to know of the server: which buttons to
// show.
type Info struct {
	CanControl bool   `json:"can_control"`
	CanRetry   bool   `json:"can_retry"`
	Server     string `json:"server"`
}

func (u *Server) info(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, Info{CanControl: u.canControl.Load(), CanRetry: u.canSubmit.Load(),
		Server: u.nc.ConnectedUrlRedacted()})
}

// sse writes server-sent events.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func startSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sse{w: w, rc: http.NewResponseController(w)}
	_ = s.rc.Flush()
	return s
}

// send writes one event. JSON has no line breaks, so the data is one line.
func (s *sse) send(event string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", event, data); err != nil {
		return err
	}
	return s.rc.Flush()
}

// ping keeps proxies from closing an idle stream and finds a browser gone.
func (s *sse) ping() error {
	if _, err := fmt.Fprint(s.w, ": ping\n\n"); err != nil {
		return err
	}
	return s.rc.Flush()
}

const ssePing = 20 * time.Second

// Serve serves the pages and the API on ln until ctx ends, then stops
// within a few seconds. A listener bound to other than loopback serves any
// host name: whoever reaches it reads every turn.
func (u *Server) Serve(ctx context.Context, ln net.Listener) error {
	host, _, _ := net.SplitHostPort(ln.Addr().String())
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		u.anyHost = true
	}
	srv := &http.Server{Handler: u.Handler(), ReadHeaderTimeout: 10 * time.Second,
		// Requests end with ctx, live streams included.
		BaseContext: func(net.Listener) context.Context { return ctx }}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return nil
}

// CanControl reports whether the credentials may send control messages:
// whether the pages show their buttons.
func (u *Server) CanControl() bool { return u.canControl.Load() }
