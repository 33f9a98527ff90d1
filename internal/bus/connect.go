package bus

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// DefaultURL is where processes look for a server when neither --nats nor
// NATS_URL says.
const DefaultURL = "nats://127.0.0.1:4222"

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
		return nil, fmt.Errorf("bus: connect %s: %w", RedactURL(rawURL), err)
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
