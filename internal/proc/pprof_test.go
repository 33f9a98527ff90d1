package proc

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"testing"
)

// TestPprofServesProfilesOnlyWhenAsked: --pprof-addr serves the Go
// profiles on its own port until stopped; without it nothing listens.
func TestPprofServesProfilesOnlyWhenAsked(t *testing.T) {
	stop, err := StartPprof("", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	stop()

	var logged bytes.Buffer
	stop, err = StartPprof("127.0.0.1:0", slog.New(slog.NewJSONHandler(&logged, nil)))
	if err != nil {
		t.Fatal(err)
	}
	var line struct{ URL string }
	if err := json.Unmarshal(logged.Bytes(), &line); err != nil || line.URL == "" {
		t.Fatalf("no URL logged: %q (%v)", logged.String(), err)
	}
	resp, err := http.Get(line.URL + "cmdline")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%scmdline: %s", line.URL, resp.Status)
	}
	stop()
	if resp, err := http.Get(line.URL + "cmdline"); err == nil {
		resp.Body.Close()
		t.Fatalf("still serving after stop: %s", resp.Status)
	}
}
