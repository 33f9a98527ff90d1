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
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// DefaultDataDir is where an embedded server keeps its streams.
const DefaultDataDir = ".jetloop"

// SyncAlways is the Sync value (and the --sync-interval spelling) of a
// server that fsyncs every stored message before acknowledging it.
const SyncAlways = "always"

// SyncUsage is the help text of every --sync-interval flag.
const SyncUsage = `when the embedded server fsyncs its streams: "always" (before every acknowledgement; ` +
	`survives power loss) or an interval such as 2m (NATS's default: an OS crash or power loss ` +
	`can lose what was acknowledged in the last interval)`

// Option changes how Start configures the server.
type Option func(*server.Options) error

// Sync sets when the server fsyncs: SyncAlways (the default: before every
// acknowledgement) or a Go duration, the interval of a background flush.
// An interval trades durability for speed: what was acknowledged since the
// last flush lives only in the OS page cache and is lost with the machine
// (power loss, kernel crash), as Jepsen showed for NATS 2.12.1.
func Sync(spec string) Option {
	return func(o *server.Options) error {
		always, d, err := ParseSync(spec)
		if err != nil {
			return err
		}
		o.SyncAlways, o.SyncInterval = always, d
		return nil
	}
}

// ParseSync reads a --sync-interval value: "always" or a positive Go
// duration.
func ParseSync(spec string) (always bool, interval time.Duration, err error) {
	if strings.EqualFold(spec, SyncAlways) || spec == "" {
		return true, 0, nil
	}
	d, err := time.ParseDuration(spec)
	if err != nil || d <= 0 {
		return false, 0, fmt.Errorf("sync interval %q: want %q or a positive duration such as 2m", spec, SyncAlways)
	}
	return false, d, nil
}

// Start starts a JetStream server in this process listening on the host
// and port of rawURL (port 0 or -1 picks a free one), with file storage in
// dir. It fsyncs every stored message before acknowledging it unless an
// option says otherwise (docs/durability.md). Shutdown it when done.
func Start(rawURL, dir string, opts ...Option) (*server.Server, error) {
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
	o := &server.Options{
		ServerName: "jetloop-embedded",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   dir,
		// The file store fsyncs each message block write before the
		// append is acknowledged (nats-server filestore.go, syncAlways);
		// without it an acknowledged write waits up to two minutes for
		// the background flush.
		SyncAlways: true,
		// The streams reserve their max_bytes (1 GiB each) against this,
		// which otherwise follows the disk's free space: a full disk is
		// reported by the writes themselves.
		JetStreamMaxStore: 1 << 40,
		NoLog:             true,
		NoSigs:            true,
	}
	for _, opt := range opts {
		if err := opt(o); err != nil {
			return nil, fmt.Errorf("embedded server: %w", err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("embedded server: %w", err)
	}
	s, err := server.NewServer(o)
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
