package tenants

import "github.com/jetloop/jetloop/internal/bus"

// Provision is p sized to fit t's storage. The server reserves each
// stream's max_bytes against the account's max_file when the stream is
// made, so the inbox, the jobs and the dead letters are given an eighth of
// it each at most; the logs, the buckets and the blobs share the rest, up
// to the account's limit.
func (t *Tenant) Provision(p bus.Provision) bus.Provision {
	if t.Storage > 0 {
		if share := int64(t.Storage) / 8; p.MaxBytes <= 0 || p.MaxBytes > share {
			p.MaxBytes = share
		}
		if p.EventsMaxBytes > int64(t.Storage) {
			p.EventsMaxBytes = -1 // the account's limit bounds it
		}
	}
	return p
}
