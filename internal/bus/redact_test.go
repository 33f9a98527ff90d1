package bus_test

import (
	"strings"
	"testing"

	"github.com/jetloop/jetloop/internal/bus"
)

// TestServerURLsShowNoPassword: a NATS URL may carry a user's password
// (nats://user:pass@host). The orchestrator logs its URL on every line and
// Connect names it in its error: neither may show the password.
func TestServerURLsShowNoPassword(t *testing.T) {
	const url = "nats://jet:s3cret@127.0.0.1:1,nats://loop:s3cret@127.0.0.1:2"
	if got := bus.RedactURL(url); strings.Contains(got, "s3cret") || !strings.Contains(got, "jet") ||
		!strings.Contains(got, "127.0.0.1:2") {
		t.Errorf("RedactURL gave %q", got)
	}
	if got := bus.RedactURL("nats://127.0.0.1:4222"); got != "nats://127.0.0.1:4222" {
		t.Errorf("RedactURL changed a URL without a password: %q", got)
	}
	_, err := bus.Connect(url, "test", func(error) {})
	if err == nil {
		t.Fatal("connected to nothing")
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("the error shows the password: %v", err)
	}
}
