package bus

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// APIPrefix is the subject prefix under which the accounts of the roles
// that are not fully trusted (client, viewer, each tool worker deployment)
// import the JetStream API of the account holding the streams: a request on
// APIPrefix+".DIRECT.GET.JETLOOP_EVENTS" reaches
// $JS.API.DIRECT.GET.JETLOOP_EVENTS there. KV puts go through
// APIPrefix+".$KV.<bucket>.<key>" (nats.go and nats.js put the prefix in
// front of a bucket's subjects when the API is prefixed). Inside those
// accounts $JS.API names nothing, so a reply subject aimed at it reaches
// nothing either.
const APIPrefix = "JETLOOP.API"

// DefaultAPIPrefix is the JetStream API of the account a connection is in.
const DefaultAPIPrefix = "$JS.API"

// DetectAPIPrefix returns the JetStream API prefix a connection's account
// uses: APIPrefix when its account imports it (an INFO request there is
// answered), else DefaultAPIPrefix. An explicit prefix (a flag, an
// environment variable) skips the round trip: see JetStreamFor.
func DetectAPIPrefix(ctx context.Context, nc *nats.Conn) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := nc.RequestWithContext(ctx, APIPrefix+".INFO", nil); err == nil {
		return APIPrefix
	}
	return DefaultAPIPrefix
}

// JetStreamFor returns a JetStream context on nc with prefix, or with the
// prefix DetectAPIPrefix finds when prefix is "" or "auto".
func JetStreamFor(ctx context.Context, nc *nats.Conn, prefix string) (jetstream.JetStream, error) {
	if prefix == "" || prefix == "auto" {
		prefix = DetectAPIPrefix(ctx, nc)
	}
	prefix = strings.TrimSuffix(prefix, ".")
	if prefix == DefaultAPIPrefix {
		return jetstream.New(nc)
	}
	if prefix == "" || strings.ContainsAny(prefix, " *>") {
		return nil, errors.New("bus: the JetStream API prefix must be a literal subject")
	}
	return jetstream.NewWithAPIPrefix(nc, prefix)
}
