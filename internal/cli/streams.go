package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/tenants"
	"github.com/nats-io/nats.go/jetstream"
)

// streams provisions the server (apply, as admin), reports how it differs
// from the protocol's table (check), or moves the logs to another number of
// streams (move, as admin, with every orchestrator stopped): the streams,
// buckets and consumers are fixed by the table, not by whichever process
// starts first.
func streams(ctx context.Context, c *command, args []string) int {
	replicas := c.flags.Int("replicas", 1, "replicas of every stream and bucket: 1, or 3 on a cluster")
	jobsStorage := c.flags.String("jobs-storage", "", "storage of JETLOOP_JOBS: memory or file (jobs are derived from the logs again after a server restart); default: as the stream is, memory for a new one")
	eventsMaxAge := c.flags.Duration("events-max-age", 30*24*time.Hour, "how long a turn's log is kept")
	eventsMaxBytes := c.flags.String("events-max-bytes", "unlimited", "bound of the logs, shared out over their streams (e.g. 50GiB)")
	eventStreams := c.flags.Int("event-streams", 0, "how many streams hold the logs: 1 (JETLOOP_EVENTS), 2, 4, 8 or 16 (JETLOOP_EVENTS_<k>, by partition); default: as the server has them, 1 on a new one; move: the number to move them to")
	maxBytes := c.flags.String("max-bytes", "1GiB", "bound of JETLOOP_INBOX, JETLOOP_JOBS and JETLOOP_DEAD each")
	deadMaxAge := c.flags.Duration("dead-max-age", 14*24*time.Hour, "how long a dead letter is kept")
	if !c.parse(args) {
		return c.exit
	}
	verb := c.flags.Arg(0)
	if c.flags.NArg() != 1 || (verb != "apply" && verb != "check" && verb != "move") {
		return c.usageErr("usage: jetloop streams [flags] apply|check|move")
	}
	if err := (events.Layout{Streams: *eventStreams}).Check(); err != nil {
		return c.usageErr("--event-streams: %v", err)
	}
	if verb == "move" && *eventStreams == 0 {
		return c.usageErr("move: --event-streams says how many streams to move the logs to")
	}
	if *replicas != 1 && *replicas != 3 {
		return c.usageErr("--replicas must be 1 or 3, got %d", *replicas)
	}
	storage := jetstream.MemoryStorage
	if *jobsStorage != "" {
		if err := storage.UnmarshalJSON([]byte(`"` + *jobsStorage + `"`)); err != nil {
			return c.usageErr("--jobs-storage must be memory or file, got %q", *jobsStorage)
		}
	}
	evBytes, err := parseBytes(*eventsMaxBytes)
	if err != nil {
		return c.usageErr("--events-max-bytes: %v", err)
	}
	bytes, err := parseBytes(*maxBytes)
	if err != nil || bytes <= 0 {
		return c.usageErr("--max-bytes must be a size such as 512MiB, got %q", *maxBytes)
	}
	if *eventsMaxAge <= 0 || *deadMaxAge <= 0 {
		return c.usageErr("--events-max-age and --dead-max-age must be positive")
	}
	nc, js, err := c.connect()
	if err != nil {
		return c.fail("%v", err)
	}
	defer nc.Close()
	p := bus.DefaultProvision(nc.MaxPayload())
	p.Replicas, p.JobsStorage, p.EventsMaxAge, p.EventsMaxBytes = *replicas, storage, *eventsMaxAge, evBytes
	p.MaxBytes, p.DeadMaxAge, p.EventStreams = bytes, *deadMaxAge, *eventStreams

	if verb == "move" {
		// No deadline: a copy takes as long as the logs are big. The new
		// streams keep the old ones' settings; only the layout is p's.
		if err := bus.MoveLogs(ctx, js, p, func(line string) { fmt.Fprintln(c.stdout, line) }); err != nil {
			return c.fail("%v", err)
		}
		return ExitOK
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if *jobsStorage == "" {
		// A deployment made when file was the default keeps its jobs
		// where they are: their storage cannot change in place, and an
		// upgrade should not fail on a flag nobody gave.
		if s, err := js.Stream(ctx, events.StreamJobs); err == nil {
			p.JobsStorage = s.CachedInfo().Config.Storage
		}
	}
	// A tenant's streams must fit its account's storage, which the server
	// says (a tenant's account, or any other with a max_file or max_mem), with
	// --tenant or --creds alike.
	ictx, icancel := context.WithTimeout(ctx, 10*time.Second)
	info, err := js.AccountInfo(ictx)
	icancel()
	if err == nil {
		p = tenants.Fit(p, info.Limits.MaxStore, info.Limits.MaxMemory)
	}
	if verb == "apply" {
		if err := c.applyStreams(ctx, js, p); err != nil {
			return c.fail("%v", err)
		}
		return ExitOK
	}
	diffs, err := bus.Check(ctx, js, p)
	if err != nil {
		return c.fail("%v", err)
	}
	layout, err := bus.DescribeLayout(ctx, js)
	if err != nil {
		return c.fail("%v", err)
	}
	fmt.Fprintln(c.stdout, layout)
	for _, d := range diffs {
		fmt.Fprintln(c.stdout, d)
	}
	if len(diffs) > 0 {
		fmt.Fprintf(c.stderr, "jetloop streams: %d difference(s) from the table; `jetloop streams apply` (as admin) sets them\n", len(diffs))
		return 1
	}
	fmt.Fprintln(c.stdout, "every stream, bucket and consumer matches the table")
	return ExitOK
}

// parseBytes reads a size: a number of bytes, or one with a unit (KiB, MiB,
// GiB, TiB, or KB, MB, GB, TB in powers of ten); "unlimited" or -1 is -1.
func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "unlimited" || s == "-1" {
		return -1, nil
	}
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	var n int64
	if _, err := fmt.Sscanf(s, "%d", &n); err != nil || n <= 0 || fmt.Sprint(n) != s {
		return 0, fmt.Errorf("not a size: %q", s)
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("too large: %q", s)
	}
	return n * mult, nil
}
