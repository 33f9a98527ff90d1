package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/nats-io/nats.go/jetstream"
)

// Dedup windows. A message re-published after a crash is dropped when its
// Nats-Msg-Id was seen within the window, so the window must cover the longest
// time between a publish and its retry: an input redelivered after its ack wait,
// a process restarted after a crash.
const (
	inboxDuplicates = 10 * time.Minute
	jobsDuplicates  = 10 * time.Minute
	eventDuplicates = 2 * time.Minute
)

// StreamConfigs are the streams of the contract.
func StreamConfigs() []jetstream.StreamConfig {
	return []jetstream.StreamConfig{
		{
			Name:        events.StreamInbox,
			Description: "jetloop: inputs of the orchestrators (submits, controls, results)",
			Subjects:    []string{"jetloop.inbox.>"},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Duplicates:  inboxDuplicates,
		},
		{
			Name:        events.StreamJobs,
			Description: "jetloop: model and tool jobs",
			Subjects:    []string{"jetloop.jobs.>"},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Duplicates:  jobsDuplicates,
		},
		{
			Name:        events.StreamEvents,
			Description: "jetloop: the event log of every turn",
			Subjects:    []string{"jetloop.events.>"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Duplicates:  eventDuplicates,
			// Direct gets serve the last event of a turn without a consumer.
			AllowDirect: true,
		},
		{
			Name:        events.StreamDead,
			Description: "jetloop: dead letters, with the reason in the Jetloop-Error header",
			Subjects:    []string{"jetloop.dead.>"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			AllowDirect: true,
		},
	}
}

// ToolsBucket is the KV bucket where tool workers advertise their tools. An
// entry lives for TTL unless its worker refreshes it.
func ToolsBucket(ttl time.Duration) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      events.BucketTools,
		Description: "jetloop: tools served by live workers",
		TTL:         ttl,
		Storage:     jetstream.FileStorage,
	}
}

// ToolsTTL is how long a tool's entry outlives its worker's last heartbeat.
const ToolsTTL = 15 * time.Second

// EnsureStreams creates every stream of the contract and the tools bucket, or
// leaves them as they are when they exist: every process calls it at start.
func EnsureStreams(ctx context.Context, js jetstream.JetStream) error {
	for _, cfg := range StreamConfigs() {
		if _, err := js.CreateStream(ctx, cfg); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return fmt.Errorf("runtime: create stream %s: %w", cfg.Name, err)
		}
	}
	if _, err := js.CreateKeyValue(ctx, ToolsBucket(ToolsTTL)); err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
		return fmt.Errorf("runtime: create bucket %s: %w", events.BucketTools, err)
	}
	return nil
}
