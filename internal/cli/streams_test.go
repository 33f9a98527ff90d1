package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats.go/jetstream"
)

// TestStreamsApplyCheck provisions a bare server with `streams apply`, finds
// no difference with `streams check`, then sees check name one limit changed
// by hand, and apply set it back.
func TestStreamsApplyCheck(t *testing.T) {
	srv := testkit.Start(t)
	_, js := srv.Connect(t)
	url := srv.ClientURL()
	jl := func(args ...string) (string, int) {
		t.Helper()
		var out bytes.Buffer
		code := Main(context.Background(), append([]string{"streams", "--nats", url}, args...), &out, &out)
		return out.String(), code
	}

	if out, code := jl("check"); code != 1 || !strings.Contains(out, "stream JETLOOP_INBOX: missing") {
		t.Fatalf("check of a bare server: exit %d, want 1 naming the missing streams:\n%s", code, out)
	}
	out, code := jl("apply")
	if code != 0 {
		t.Fatalf("apply: exit %d:\n%s", code, out)
	}
	for _, want := range []string{"created stream JETLOOP_EVENTS", "created bucket JETLOOP_WORKERS", "created object store JETLOOP_BLOBS", "set consumer orchestrator of JETLOOP_INBOX"} {
		if !strings.Contains(out, want) {
			t.Errorf("apply did not say %q:\n%s", want, out)
		}
	}
	if out, code := jl("check"); code != 0 {
		t.Fatalf("check after apply: exit %d:\n%s", code, out)
	}
	if out, code := jl("apply"); code != 0 || !strings.Contains(out, "nothing to do") {
		t.Fatalf("a second apply: exit %d, want nothing to do:\n%s", code, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxAge = time.Hour
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	out, code = jl("check")
	if code != 1 || !strings.Contains(out, "stream JETLOOP_EVENTS: max_age is 1h0m0s, want 720h0m0s") {
		t.Fatalf("check after a manual change: exit %d, want 1 naming max_age:\n%s", code, out)
	}
	if strings.Count(out, "stream ")+strings.Count(out, "bucket ")+strings.Count(out, "consumer ") != 1 {
		t.Errorf("check named more than the one change:\n%s", out)
	}
	if out, code := jl("apply"); code != 0 || !strings.Contains(out, "updated stream JETLOOP_EVENTS: max_age is 1h0m0s, want 720h0m0s") {
		t.Fatalf("apply after a manual change: exit %d:\n%s", code, out)
	}
	if out, code := jl("check"); code != 0 {
		t.Fatalf("check after apply: exit %d:\n%s", code, out)
	}
}

// TestStreamsCheckSeesForgingRoutes: a stream that republishes, or an
// inbox without its bound, is a difference, not a detail.
func TestStreamsCheckSeesForgingRoutes(t *testing.T) {
	srv := testkit.Start(t)
	_, js := srv.Connect(t)
	var out bytes.Buffer
	if code := Main(context.Background(), []string{"streams", "--nats", srv.ClientURL(), "apply"}, &out, &out); code != 0 {
		t.Fatalf("apply: %d\n%s", code, out.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, events.StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.RePublish = &jetstream.RePublish{Source: "jetloop.dead.>", Destination: "jetloop.inbox.x.>"}
	cfg.MaxBytes = -1
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	code := Main(context.Background(), []string{"streams", "--nats", srv.ClientURL(), "check"}, &out, &out)
	if code != 1 || !strings.Contains(out.String(), "republishes jetloop.dead.> to jetloop.inbox.x.>") ||
		!strings.Contains(out.String(), "stream JETLOOP_DEAD: max_bytes is -1, want 1073741824") {
		t.Fatalf("check: exit %d, want 1 naming the republish and the bound:\n%s", code, out.String())
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"1GiB": 1 << 30, "512MiB": 512 << 20, "10MB": 10e6, "4096": 4096, "unlimited": -1, "-1": -1} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "1.5GiB", "-5", "0", "1e9", "x1", "99999999999TiB"} {
		if got, err := parseBytes(in); err == nil {
			t.Errorf("parseBytes(%q) = %d, want an error", in, got)
		}
	}
}

// TestStreamsApplyReplicas3 provisions a 3-node cluster with `streams apply
// --replicas 3`: every stream, bucket and the object store, and whatever
// consumers apply sets up, are R3 with a leader and two current followers;
// `streams check --replicas 3` finds no difference, while a check against
// the single-server table names the replicas.
func TestStreamsApplyReplicas3(t *testing.T) {
	c := testkit.StartCluster(t, 3)
	_, js := c.Connect(t)
	jl := func(args ...string) (string, int) {
		t.Helper()
		var out bytes.Buffer
		code := Main(context.Background(), append([]string{"streams", "--nats", c.URLs}, args...), &out, &out)
		return out.String(), code
	}
	out, code := jl("--replicas", "3", "apply")
	if code != 0 {
		t.Fatalf("apply --replicas 3: exit %d:\n%s", code, out)
	}
	if out, code := jl("--replicas", "3", "check"); code != 0 {
		t.Fatalf("check --replicas 3 after apply: exit %d:\n%s", code, out)
	}
	if out, code := jl("--replicas", "3", "apply"); code != 0 || !strings.Contains(out, "nothing to do") {
		t.Fatalf("a second apply --replicas 3: exit %d, want nothing to do:\n%s", code, out)
	}
	if out, code := jl("check"); code != 1 || !strings.Contains(out, "stream JETLOOP_EVENTS: replicas is 3, want 1") ||
		!strings.Contains(out, "bucket JETLOOP_TOOLS: replicas is 3, want 1") {
		t.Fatalf("check against one replica: exit %d, want 1 naming the replicas:\n%s", code, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := []string{events.StreamInbox, events.StreamJobs, events.StreamEvents, events.StreamDead,
		"OBJ_" + bus.BucketBlobs}
	for _, b := range bus.DefaultProvision(1 << 20).Buckets() {
		names = append(names, "KV_"+b.Bucket)
	}
	for _, name := range names {
		var info *jetstream.StreamInfo
		testkit.WaitFor(t, name+" to have three current replicas", func() bool {
			s, err := js.Stream(ctx, name)
			if err != nil {
				t.Fatalf("stream %s: %v", name, err)
			}
			info = s.CachedInfo()
			return replicated(info.Cluster)
		})
		if info.Config.Replicas != 3 {
			t.Errorf("%s has %d replicas", name, info.Config.Replicas)
		}
	}
	// Whatever consumers apply set up, by whatever names, are R3 too.
	consumers := 0
	for _, stream := range names {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		for info := range s.ListConsumers(ctx).Info() {
			consumers++
			testkit.WaitFor(t, "consumer "+info.Name+" to have three current replicas", func() bool {
				cons, err := s.Consumer(ctx, info.Name)
				if err != nil {
					t.Fatalf("consumer %s of %s: %v", info.Name, stream, err)
				}
				return replicated(cons.CachedInfo().Cluster)
			})
		}
	}
	if consumers == 0 {
		t.Error("apply set up no consumer")
	}
}

// replicated reports whether a stream or consumer has a leader and two
// current followers.
func replicated(c *jetstream.ClusterInfo) bool {
	if c == nil || c.Leader == "" || len(c.Replicas) != 2 {
		return false
	}
	for _, r := range c.Replicas {
		if !r.Current || r.Offline {
			return false
		}
	}
	return true
}

// TestStreamsJobsStorage: apply puts the jobs of a new deployment in memory
// storage; a deployment whose jobs are on file (the default before) keeps
// them there through apply and check without the flag, and the flag still
// says which storage a new stream gets.
func TestStreamsJobsStorage(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first []string // the flags of the first apply
		want  jetstream.StorageType
	}{
		{"default", nil, jetstream.MemoryStorage},
		{"file kept", []string{"--jobs-storage", "file"}, jetstream.FileStorage},
		{"memory asked", []string{"--jobs-storage", "memory"}, jetstream.MemoryStorage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := testkit.Start(t)
			_, js := srv.Connect(t)
			jl := func(args ...string) {
				t.Helper()
				var out bytes.Buffer
				if code := Main(context.Background(), append([]string{"streams", "--nats", srv.ClientURL()}, args...), &out, &out); code != 0 {
					t.Fatalf("streams %v: exit %d:\n%s", args, code, out.String())
				}
			}
			jl(append(tc.first, "apply")...)
			jl("apply") // without the flag: as it is
			jl("check")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := js.Stream(ctx, events.StreamJobs)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.CachedInfo().Config.Storage; got != tc.want {
				t.Fatalf("%s on %s storage, want %s", events.StreamJobs, got, tc.want)
			}
		})
	}
}
