// Package embedded starts a JetStream server inside the process: the
// default mode of jetloop dev and demo, and every test's server. It is its
// own package so that only the programs that embed a server link it.
package embedded

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// DefaultDataDir is where an embedded server keeps its streams.
const DefaultDataDir = ".jetloop"

// Start starts a JetStream server in this process listening on the host
// and port of rawURL (port 0 or -1 picks a free one), with file storage in
// dir. Shutdown it when done.
func Start(rawURL, dir string) (*server.Server, error) {
	host, port := "127.0.0.1", -1
	if rawURL != "" {
		u, err := url.Parse(rawURL)
		if err != nil {
			return nil, fmt.Errorf("embedded server: %w", err)
		}
		if h := u.Hostname(); h != "" {
			host = h
		}
		if p := u.Port(); p != "" {
			if port, err = strconv.Atoi(p); err != nil {
				return nil, fmt.Errorf("embedded server: port %q: %w", p, err)
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("embedded server: %w", err)
	}
	s, err := server.NewServer(&server.Options{
		ServerName: "jetloop-embedded",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   dir,
		// The streams reserve their max_bytes (1 GiB each) against this,
		// which otherwise follows the disk's free space: a full disk is
		// reported by the writes themselves.
		JetStreamMaxStore: 1 << 40,
		NoLog:             true,
		NoSigs:            true,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded server: %w", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, errors.New("embedded server did not start")
	}
	return s, nil
}
