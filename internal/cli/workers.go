package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/nats-io/nats.go/jetstream"
)

// Served is one tool or hook that workers advertise, as jetloop workers
// --json prints it.
type Served struct {
	Name string `json:"name"`
	Kind string `json:"kind"` // "tool" or "hook"
	// Workers serving it now, and jobs waiting for one of them.
	Workers   int   `json:"workers"`
	Queued    int64 `json:"queued"`
	TimeoutMs int64 `json:"timeout_ms,omitempty"`
}

// LiveWorker is one worker process: what it serves (its deployment's
// tools and hooks) and when it last said it was alive.
type LiveWorker struct {
	Name   string    `json:"name"`
	Serves []string  `json:"serves"`
	Seen   time.Time `json:"seen,omitzero"`
}

// Workers is jetloop workers --json.
type Workers struct {
	Served  []Served     `json:"served"`
	Workers []LiveWorker `json:"workers"`
}

func workersCmd(ctx context.Context, c *command, args []string) int {
	asJSON := c.flags.Bool("json", false, "print one JSON object")
	if !c.parse(args) {
		return c.exit
	}
	if c.flags.NArg() != 0 {
		return c.usageErr("workers takes no arguments")
	}
	nc, js, err := c.connect()
	if err != nil {
		return c.fail("%v", err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	w, err := readWorkers(ctx, js)
	if err != nil {
		return c.fail("%v", err)
	}
	if *asJSON {
		_ = json.NewEncoder(c.stdout).Encode(w)
		return ExitOK
	}
	if len(w.Served) == 0 && len(w.Workers) == 0 {
		fmt.Fprintln(c.stdout, "no workers: no tool or hook is served (is a toolworker running?)")
		return ExitOK
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVED\tKIND\tWORKERS\tQUEUED\tTIMEOUT")
	for _, s := range w.Served {
		timeout := "-"
		if s.TimeoutMs > 0 {
			timeout = (time.Duration(s.TimeoutMs) * time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", s.Name, s.Kind, s.Workers, s.Queued, timeout)
	}
	fmt.Fprintln(tw, "\t\t\t\t")
	fmt.Fprintln(tw, "WORKER\tSEEN\tSERVES\t\t")
	for _, l := range w.Workers {
		seen := "?"
		if !l.Seen.IsZero() {
			seen = since(time.Since(l.Seen)) + " ago"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t\t\n", l.Name, seen, strings.Join(l.Serves, " "))
	}
	_ = tw.Flush()
	return ExitOK
}

// readWorkers reads what the workers advertise: the tools bucket's keys
// (a tool's name, or hook.<name>), the workers bucket's (<tool>.<worker>,
// refreshed while the worker lives) and the jobs waiting on each tool's
// subject. The keys are listed from the buckets' streams (stream info,
// which every role may ask); their values only where the role may read
// them (admin): a viewer sees names and counts.
func readWorkers(ctx context.Context, js jetstream.JetStream) (Workers, error) {
	var w Workers
	workerKeys, err := bucketKeys(ctx, js, bus.BucketWorkers)
	if err != nil {
		return w, err
	}
	workersKV, _ := js.KeyValue(ctx, bus.BucketWorkers)
	live := map[string]*LiveWorker{}
	count := map[string]int{}
	for _, key := range workerKeys {
		var tool, name string
		if rest, ok := strings.CutPrefix(key, "hook."); ok {
			tool, name, _ = strings.Cut(rest, ".")
			tool = "hook." + tool
		} else {
			tool, name, _ = strings.Cut(key, ".")
		}
		var seen time.Time
		if workersKV != nil {
			e, err := workersKV.Get(ctx, key)
			switch {
			case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
				continue // withdrawn
			case err != nil:
				workersKV = nil // not this role's to read: names only
			default:
				seen, _ = time.Parse(time.RFC3339Nano, string(e.Value()))
			}
		}
		count[tool]++
		l := live[name]
		if l == nil {
			l = &LiveWorker{Name: name}
			live[name] = l
		}
		l.Serves = append(l.Serves, tool)
		if seen.After(l.Seen) {
			l.Seen = seen
		}
	}
	toolKeys, err := bucketKeys(ctx, js, events.BucketTools)
	if err != nil {
		return w, err
	}
	toolsKV, _ := js.KeyValue(ctx, events.BucketTools)
	queued, _ := jobsBySubject(ctx, js)
	for _, key := range toolKeys {
		s := Served{Name: key, Kind: "tool", Workers: count[key]}
		subject := events.ToolSubject(key)
		if name, ok := strings.CutPrefix(key, "hook."); ok {
			s.Name, s.Kind, subject = name, "hook", "jetloop.jobs.hook."+name
		}
		s.Queued = int64(queued[subject])
		if toolsKV != nil {
			e, err := toolsKV.Get(ctx, key)
			switch {
			case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
				continue // withdrawn: its last worker is gone
			case err != nil:
				toolsKV = nil
			default:
				var info events.ToolInfo
				if json.Unmarshal(e.Value(), &info) == nil {
					s.TimeoutMs = info.TimeoutMs
				}
			}
		}
		w.Served = append(w.Served, s)
	}
	slices.SortFunc(w.Served, func(a, b Served) int { return strings.Compare(a.Kind+a.Name, b.Kind+b.Name) })
	for _, l := range live {
		slices.Sort(l.Serves)
		w.Workers = append(w.Workers, *l)
	}
	slices.SortFunc(w.Workers, func(a, b LiveWorker) int { return strings.Compare(a.Name, b.Name) })
	return w, nil
}

// bucketKeys lists the keys that have a message in a bucket's stream.
func bucketKeys(ctx context.Context, js jetstream.JetStream, bucket string) ([]string, error) {
	prefix := "$KV." + bucket + "."
	subjects, err := streamSubjects(ctx, js, "KV_"+bucket, prefix+">")
	if err != nil {
		return nil, fmt.Errorf("workers: bucket %s: %w", bucket, err)
	}
	keys := make([]string, 0, len(subjects))
	for s := range subjects {
		keys = append(keys, strings.TrimPrefix(s, prefix))
	}
	slices.Sort(keys)
	return keys, nil
}

// jobsBySubject counts the jobs waiting in the jobs stream by subject.
func jobsBySubject(ctx context.Context, js jetstream.JetStream) (map[string]uint64, error) {
	return streamSubjects(ctx, js, events.StreamJobs, "jetloop.jobs.>")
}

func streamSubjects(ctx context.Context, js jetstream.JetStream, stream, filter string) (map[string]uint64, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, err
	}
	return info.State.Subjects, nil
}
