package bench

import (
	"os"

	"github.com/jetloop/jetloop/internal/embedded"
)

// BENCH_SYNC sets the embedded server's sync interval of the benchmarks
// ("always", the default, or a duration such as 2m: NATS's default).
func init() {
	if v := os.Getenv("BENCH_SYNC"); v != "" {
		serverOptions = append(serverOptions, embedded.Sync(v))
	}
}
