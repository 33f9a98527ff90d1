package runtime

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// DefaultURL is where processes look for a server when neither --nats nor
// NATS_URL says.
const DefaultURL = "nats://127.0.0.1:4222"

// DefaultDataDir is where an embedded server keeps its streams.
const DefaultDataDir = ".jetloop"

// Embedded starts a JetStream server in this process listening on the host
// and port of rawURL (port 0 or -1 picks a free one), with file storage in
// dir. Shutdown it when done.
func Embedded(rawURL, dir string) (*server.Server, error) {
	host, port := "127.0.0.1", -1
	if rawURL != "" {
		u, err := url.Parse(rawURL)
		if err != nil {
			return nil, fmt.Errorf("runtime: embedded server: %w", err)
		}
		if h := u.Hostname(); h != "" {
			host = h
		}
		if p := u.Port(); p != "" {
			if port, err = strconv.Atoi(p); err != nil {
				return nil, fmt.Errorf("runtime: embedded server: port %q: %w", p, err)
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("runtime: embedded server: %w", err)
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
		return nil, fmt.Errorf("runtime: embedded server: %w", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, errors.New("runtime: embedded server did not start")
	}
	return s, nil
}

// Answers reports whether something accepts connections at a server URL.
func Answers(rawURL string) bool {
	u, err := url.Parse(rawURL)
	if err != nil {
		return false
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "4222")
	}
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// Connect opens a client connection that reconnects forever and reports
// asynchronous errors (a denied publish looks like a timeout otherwise).
func Connect(rawURL, name string, onErr func(error), opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				err = fmt.Errorf("%s: %w", sub.Subject, err)
			}
			onErr(err)
		}),
	}, opts...)
	nc, err := nats.Connect(rawURL, opts...)
	if err != nil {
		return nil, fmt.Errorf("runtime: connect %s: %w", RedactURL(rawURL), err)
	}
	return nc, nil
}

// RedactURL is a server URL, or a comma-separated list of them, as it may be
// logged: a password in it is replaced by xxxxx.
func RedactURL(rawURL string) string {
	parts := strings.Split(rawURL, ",")
	for i, p := range parts {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil {
			parts[i] = u.Redacted()
		} else if at := strings.LastIndex(p, "@"); at >= 0 {
			parts[i] = "…" + p[at:] // unparsable: what precedes @ may be a password
		}
	}
	return strings.Join(parts, ",")
}
