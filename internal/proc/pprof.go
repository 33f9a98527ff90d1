package proc

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// PprofAddrUsage is the help of every process's --pprof-addr.
const PprofAddrUsage = "serve Go's /debug/pprof/ profiles on HOST:PORT (off when empty; for diagnosis, keep it on loopback)"

// StartPprof serves the Go runtime's profiles (net/http/pprof) on addr until
// stop is called; with addr empty, it serves nothing and stop does nothing.
// The handlers are registered on a mux of their own, never on
// http.DefaultServeMux, so no other server of the process exposes them.
func StartPprof(addr string, log *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("pprof endpoint stopped", "err", err)
		}
	}()
	log.Info("serving profiles", "url", "http://"+ln.Addr().String()+"/debug/pprof/")
	return func() {
		// A profile being taken ends with the process: do not wait for it.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}
