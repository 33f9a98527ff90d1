package tenants

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/nats-io/nats.go/jetstream"
)

// Provision is p sized to fit t's storage (Fit).
func (t *Tenant) Provision(p bus.Provision) bus.Provision {
	return Fit(p, int64(t.Storage), int64(t.Memory))
}

// Fit is p sized to fit an account whose file storage is limited to maxStore
// bytes (its max_file; 0 or less: unlimited). The server reserves each
// stream's max_bytes against that limit when the stream is made, so the
// inbox, the jobs and the dead letters are given an eighth of it each at
// most, the workers' bucket a sixteenth; the logs, the other buckets and the
// blobs share the rest, up to the account's limit. With the jobs in memory
// storage, whose max_bytes the server reserves against the account's max_mem
// (maxMem), the bounded streams get at most half of that.
func Fit(p bus.Provision, maxStore, maxMem int64) bus.Provision {
	if maxStore > 0 {
		if share := maxStore / 8; p.MaxBytes <= 0 || p.MaxBytes > share {
			p.MaxBytes = share
		}
		if share := maxStore / 16; p.WorkersMaxBytes <= 0 || p.WorkersMaxBytes > share {
			p.WorkersMaxBytes = share
		}
	}
	if maxMem > 0 && p.JobsStorage == jetstream.MemoryStorage {
		if share := maxMem / 2; p.MaxBytes <= 0 || p.MaxBytes > share {
			p.MaxBytes = share
		}
	}
	if maxStore <= 0 {
		return p
	}
	if p.EventsMaxBytes > maxStore {
		p.EventsMaxBytes = -1 // the account's limit bounds it
	}
	return p
}

// ErrNotProvisioned is a tenant whose account has no jetloop streams yet.
var ErrNotProvisioned = errors.New("tenants: the tenant's streams are not provisioned")

// CheckProvisioned returns ErrNotProvisioned when the account js reaches
// has no tools bucket, which every role of a tenant reads: a process
// serving the tenants then waits for `jetloop streams apply` instead of
// trying (and being refused) to make the streams itself.
func CheckProvisioned(ctx context.Context, js jetstream.JetStream) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := js.KeyValue(ctx, events.BucketTools)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return ErrNotProvisioned
	}
	return err
}

// NotProvisioned is the one line a process serving the tenants of the file
// at path logs for tenant while it waits for its streams: what to run.
func NotProvisioned(path, tenant string) string {
	return fmt.Sprintf("tenant %s is not provisioned yet: run `jetloop streams apply --tenant %s --tenants %s` (until then it is tried again with a growing pause)",
		tenant, tenant, path)
}
