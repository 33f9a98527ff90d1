package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/model"
	"github.com/jetloop/jetloop/internal/stack"
	"github.com/jetloop/jetloop/internal/tenants"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Tenancy is the shipped multi-tenant deployment (deploy/tenants) measured
// in the deployed shape: a nats-server process, one orchestrator process
// serving every tenant (--tenants), one tool worker process per tenant,
// with sync always. Tenant b's turns are timed idle, while tenant a's
// untrusted roles load the server (roleLoad), and while tenant a floods
// its own inbox and model runners; a sequential step is timed in b and in
// the single-tenant shape, alternated, for the cost of tenancy.
type Tenancy struct {
	// SingleStepP50Ms and TenantStepP50Ms are the sequential tool step's
	// p50 in the single-tenant shape and in tenant b, medians over the
	// alternated rounds.
	SingleStepP50Ms []float64 `json:"single_step_p50_ms"`
	TenantStepP50Ms []float64 `json:"tenant_step_p50_ms"`
	// BTurns of b's turns (two steps: an echo call, then an answer) run
	// at once: their submit-to-finish time, idle and under a's flood.
	BTurns          int     `json:"b_turns"`
	IdleTurnP50Ms   float64 `json:"idle_turn_p50_ms"`
	IdleTurnMaxMs   float64 `json:"idle_turn_max_ms"`
	FloodTurnP50Ms  float64 `json:"flood_turn_p50_ms"`
	FloodTurnMaxMs  float64 `json:"flood_turn_max_ms"`
	FloodSubmitted  int     `json:"flood_submitted"`
	FloodSlowCalls  int     `json:"flood_slow_calls"`
	FloodLeftQueued uint64  `json:"flood_left_queued"`
	// RolesIdleP50Ms and RolesTurnP50Ms are b's turns' p50 idle and while
	// a's viewer, client and tool worker do the worst they may (roleLoad),
	// in alternated rounds; the rates are the load's, over those rounds.
	RolesIdleP50Ms []float64 `json:"roles_idle_p50_ms"`
	RolesTurnP50Ms []float64 `json:"roles_turn_p50_ms"`
	RolesTurnMaxMs float64   `json:"roles_turn_max_ms"`
	RolesReadsPerS float64   `json:"roles_reads_per_s"`
	RolesPutsPerS  float64   `json:"roles_puts_per_s"`
	RolesSubs      int       `json:"roles_subs"`
	// RolesServerCores and RolesDriverCores are the CPU the server and
	// this process (a's roles' side, and b's submitter and watcher) used
	// per second under the load: on one machine the roles' own CPU is
	// taken from what b's processes could have had.
	RolesServerCores float64 `json:"roles_server_cores"`
	RolesDriverCores float64 `json:"roles_driver_cores"`
}

// median of the rounds.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}

// tenancy measures the multi-tenant deployment.
func (b *run) tenancy(ctx context.Context, sz sizes) error {
	bins, repo, err := b.deployment()
	if err != nil {
		return err
	}
	t := &Tenancy{BTurns: 20, FloodSubmitted: sz.floodSubmissions, FloodSlowCalls: sz.floodSlow}
	b.res.Tenancy = t
	for round := range sz.tenancyRounds {
		fmt.Fprintf(b.cfg.Progress, "bench:   tenancy round %d: single-tenant shape\n", round+1)
		// The same jobs storage as the tenants are provisioned with.
		single, err := b.startShape(ctx, bins, repo, "always", storageName(bus.DefaultProvision(0).JobsStorage))
		if err != nil {
			return err
		}
		var d Deployed
		err = single.sequential(ctx, sz, &d)
		single.stop()
		if err != nil {
			return fmt.Errorf("single-tenant sequential: %w", err)
		}
		t.SingleStepP50Ms = append(t.SingleStepP50Ms, d.StepP50Ms)

		fmt.Fprintf(b.cfg.Progress, "bench:   tenancy round %d: tenants a and b\n", round+1)
		sh, err := b.startTenantShape(ctx, bins, repo)
		if err != nil {
			return err
		}
		err = b.tenantRound(ctx, sz, sh, t, round == sz.tenancyRounds-1)
		sh.stop()
		if err != nil {
			return err
		}
		fmt.Fprintf(b.cfg.Progress, "bench:     step p50: single tenant %.3f ms, tenant %.3f ms\n",
			t.SingleStepP50Ms[round], t.TenantStepP50Ms[round])
	}
	fmt.Fprintf(b.cfg.Progress, "bench:     b's turns p50: idle %.1f ms, under a's roles %.1f / %.1f ms, under a's flood %.1f ms (%d of a's submissions still queued)\n",
		t.IdleTurnP50Ms, median(t.RolesTurnP50Ms), median(t.RolesIdleP50Ms), t.FloodTurnP50Ms, t.FloodLeftQueued)
	return nil
}

// tenantRound measures b's sequential step and, in the last round, b's
// turns idle, under a's roles' load and under a's flood.
func (b *run) tenantRound(ctx context.Context, sz sizes, sh *tenantShape, t *Tenancy, flood bool) error {
	var d Deployed
	if err := sh.b.sequential(ctx, sz, &d); err != nil {
		return sh.b.explain(fmt.Errorf("tenant sequential: %w", err))
	}
	t.TenantStepP50Ms = append(t.TenantStepP50Ms, d.StepP50Ms)
	if !flood {
		return nil
	}
	w, err := watch(sh.b.admin)
	if err != nil {
		return err
	}
	defer w.stop()
	idle, err := sh.burst(ctx, w, "idle", t.BTurns)
	if err != nil {
		return sh.b.explain(fmt.Errorf("b idle: %w", err))
	}
	t.IdleTurnP50Ms, t.IdleTurnMaxMs = ms(percentile(idle, 0.5)), ms(percentile(idle, 1))
	if err := sh.roles(ctx, w, t); err != nil {
		return sh.b.explain(fmt.Errorf("b under a's roles: %w", err))
	}
	if err := sh.flood(ctx, sz.floodSlow, sz.floodSubmissions); err != nil {
		return sh.b.explain(fmt.Errorf("a's flood: %w", err))
	}
	flooded, err := sh.burst(ctx, w, "flood", t.BTurns)
	if err != nil {
		return sh.b.explain(fmt.Errorf("b under a's flood: %w", err))
	}
	t.FloodTurnP50Ms, t.FloodTurnMaxMs = ms(percentile(flooded, 0.5)), ms(percentile(flooded, 1))
	if t.FloodLeftQueued, err = sh.queued(ctx); err != nil {
		return err
	}
	return nil
}

// tenantShape is the multi-tenant deployment running: b is tenant b's
// side as a shape (its admin and client connections; the orchestrator;
// its tool worker), a's the other tenant's connections and worker.
type tenantShape struct {
	b        *shape
	aworker  *child
	aadmin   *nats.Conn
	aajs     jetstream.JetStream
	aclient  *nats.Conn
	acjs     jetstream.JetStream
	seedPath func(tenant, role string) string
}

func (sh *tenantShape) stop() {
	if sh.b.orch != nil {
		_ = sh.b.orch.stop()
		sh.b.orch = nil
	}
	if sh.aworker != nil {
		_ = sh.aworker.stop()
	}
	for _, nc := range []*nats.Conn{sh.aadmin, sh.aclient} {
		if nc != nil {
			nc.Close()
		}
	}
	sh.b.stop()
}

// startTenantShape starts a nats-server process with a copy of
// deploy/tenants (its tenants a and b, their seeds), provisions each
// tenant's streams as its admin, then a tool worker per tenant and one
// orchestrator serving both.
func (b *run) startTenantShape(ctx context.Context, bins programs, repo string) (_ *tenantShape, err error) {
	dir, err := os.MkdirTemp("", "jetloop-tenants-")
	if err != nil {
		return nil, err
	}
	sh := &tenantShape{b: &shape{b: b, dir: dir, repo: repo, logs: map[string]string{}, pprof: map[string]string{}, sync: "always", storage: "file", kind: "tenants"}}
	defer func() {
		if err != nil {
			err = sh.b.explain(err)
			sh.stop()
		}
	}()
	file, conf, err := tenants.Copy(filepath.Join(repo, "deploy"), dir, "127.0.0.1:-1", filepath.Join(dir, "store"))
	if err != nil {
		return nil, err
	}
	sh.seedPath = func(tenant, role string) string { return tenants.SeedPath(file, tenant, role) }
	if sh.b.server, err = sh.b.start("nats-server", bins["nats-server"], "-c", conf, "--ports_file_dir", dir, "-m", "-1"); err != nil {
		return nil, err
	}
	ports, err := sh.b.serverPorts(ctx)
	if err != nil {
		return nil, err
	}
	sh.b.url = ports.Nats[0]
	if len(ports.Monitoring) > 0 {
		sh.b.monitor = ports.Monitoring[0]
		if err := sh.b.checkSync(ctx); err != nil {
			return nil, err
		}
	}
	if sh.aadmin, sh.aajs, err = sh.connect("a", tenants.Admin); err != nil {
		return nil, err
	}
	if sh.aclient, sh.acjs, err = sh.connect("a", tenants.Client); err != nil {
		return nil, err
	}
	if sh.b.admin, sh.b.ajs, err = sh.connect("b", tenants.Admin); err != nil {
		return nil, err
	}
	if sh.b.client, sh.b.cjs, err = sh.connect("b", tenants.Client); err != nil {
		return nil, err
	}
	f, err := tenants.Load(file)
	if err != nil {
		return nil, err
	}
	for name, js := range map[string]jetstream.JetStream{"a": sh.aajs, "b": sh.b.ajs} {
		t := f.Get(name)
		if t == nil {
			return nil, fmt.Errorf("%s has no tenant %s", file, name)
		}
		if _, err := bus.Apply(ctx, js, t.Provision(bus.DefaultProvision(sh.aadmin.MaxPayload()))); err != nil {
			return nil, fmt.Errorf("provision tenant %s: %w", name, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "AGENTS.md"), []byte(agentsFile), 0o644); err != nil {
		return nil, err
	}
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		return nil, err
	}
	worker := func(tenant string) []string {
		return []string{"--nats", sh.b.url, "--creds", sh.seedPath(tenant, tenants.Toolworker), "--root", root, "--concurrency", "64"}
	}
	if sh.aworker, err = sh.b.start("toolworker-a", bins["toolworker"], worker("a")...); err != nil {
		return nil, err
	}
	if sh.b.worker, err = sh.b.start("toolworker", bins["toolworker"], worker("b")...); err != nil {
		return nil, err
	}
	if sh.b.orch, err = sh.b.start("orchestrator", bins["orchestrator"], "--nats", sh.b.url, "--tenants", file,
		"--agents", filepath.Join(dir, "AGENTS.md"), "--allow-scripts"); err != nil {
		return nil, err
	}
	for _, js := range []jetstream.JetStream{sh.aajs, sh.b.ajs} {
		if err := stack.WaitTool(ctx, js, "echo"); err != nil {
			return nil, err
		}
		if err := stack.WaitServing(ctx, js); err != nil {
			return nil, err
		}
	}
	return sh, nil
}

// connect connects as a tenant's user; roles in accounts of their own use
// the API prefix.
func (sh *tenantShape) connect(tenant, role string) (*nats.Conn, jetstream.JetStream, error) {
	auth := bus.Auth{Creds: sh.seedPath(tenant, role), Inbox: bus.InboxCLI}
	return dial(sh.b.url, "jetloop bench "+tenant+" "+role, auth, sh.b.b.log)
}

// burst submits n of b's two-step turns at once and returns each one's
// submit-to-finish time.
func (sh *tenantShape) burst(ctx context.Context, w *watcher, name string, n int) ([]time.Duration, error) {
	var wg sync.WaitGroup
	took := make([]time.Duration, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			turn := fmt.Sprintf("b-%s-%d", name, i)
			began := time.Now()
			if err := submit(ctx, sh.b.cjs, turn, script(turn, 2, 0)); err != nil {
				errs[i] = err
				return
			}
			errs[i] = w.until(ctx, 5*time.Minute, "turn "+turn, func() bool {
				st := w.turns[turn]
				return st != nil && st.finished
			})
			took[i] = time.Since(began)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return took, nil
}

// rolesRounds are the alternated rounds of b's turns idle and under a's
// roles' load: one burst is a fraction of a second, noisy alone.
const rolesRounds = 5

// roles times b's turns while a's untrusted roles load the server
// (roleLoad), alternated with b's turns idle, after a few of a's turns
// have given its readers logs to read.
func (sh *tenantShape) roles(ctx context.Context, w *watcher, t *Tenancy) error {
	if err := sh.seed(ctx, 5, 10); err != nil {
		return err
	}
	var reads, puts, secs, server, driver float64
	quiet, err := sh.b.varz(ctx)
	if err != nil {
		return err
	}
	for round := range rolesRounds {
		// The server lets go of a's connections and their subscriptions
		// for a while after they close: b's idle turns wait for that.
		settling := time.Now()
		if err := sh.b.settle(ctx, quiet); err != nil {
			// Something else may hold a subscription more by now: the
			// figure is still worth having, said to be taken unsettled.
			fmt.Fprintf(sh.b.b.cfg.Progress, "bench:     not settled: %v\n", err)
		} else if round > 0 {
			fmt.Fprintf(sh.b.b.cfg.Progress, "bench:     the server let go of a's roles in %.1f s\n", time.Since(settling).Seconds())
		}
		idle, err := sh.burst(ctx, w, fmt.Sprintf("roles-idle-%d", round), t.BTurns)
		if err != nil {
			return err
		}
		t.RolesIdleP50Ms = append(t.RolesIdleP50Ms, ms(percentile(idle, 0.5)))
		server0, err := cpu(sh.b.server.pid())
		if err != nil {
			return err
		}
		driver0 := selfCPU()
		l, err := startRoleLoad(ctx, sh.b.url, func(role string) string { return sh.seedPath("a", role) })
		if err != nil {
			return err
		}
		if err := l.busy(ctx); err != nil {
			return errors.Join(err, l.stop())
		}
		loaded, err := sh.burst(ctx, w, fmt.Sprintf("roles-%d", round), t.BTurns)
		r, p := l.rates()
		s := time.Since(l.began).Seconds()
		if err := errors.Join(err, l.stop()); err != nil {
			return err
		}
		server1, err := cpu(sh.b.server.pid())
		if err != nil {
			return err
		}
		server, driver = server+(server1-server0).Seconds(), driver+(selfCPU()-driver0).Seconds()
		reads, puts, secs = reads+r*s, puts+p*s, secs+s
		t.RolesTurnP50Ms = append(t.RolesTurnP50Ms, ms(percentile(loaded, 0.5)))
		t.RolesTurnMaxMs = max(t.RolesTurnMaxMs, ms(percentile(loaded, 1)))
		t.RolesSubs = l.subs
		fmt.Fprintf(sh.b.b.cfg.Progress, "bench:     roles round %d: b's turns p50 idle %.1f ms, under a's roles %.1f ms (%.0f reads/s, %.0f puts/s)\n",
			round+1, t.RolesIdleP50Ms[round], t.RolesTurnP50Ms[round], r, p)
	}
	t.RolesReadsPerS, t.RolesPutsPerS = reads/secs, puts/secs
	t.RolesServerCores, t.RolesDriverCores = server/secs, driver/secs
	return nil
}

// seed runs n of a's turns of k steps, so that its logs are not empty.
func (sh *tenantShape) seed(ctx context.Context, n, k int) error {
	w, err := watch(sh.aadmin)
	if err != nil {
		return err
	}
	defer w.stop()
	for i := range n {
		turn := fmt.Sprintf("a-seed-%d", i)
		if err := submit(ctx, sh.acjs, turn, script(turn, k, 0)); err != nil {
			return err
		}
	}
	return w.until(ctx, 5*time.Minute, "a's seed turns", func() bool { return w.finished == n })
}

// flood has tenant a submit slow turns (their model answers after two
// minutes) and then n quick ones, as fast as the server stores them.
func (sh *tenantShape) flood(ctx context.Context, slow, n int) error {
	pub := func(prefix string, count int, sc *model.Script) error {
		for i := range count {
			turn := fmt.Sprintf("a-%s-%d", prefix, i)
			data, err := submission(turn, sc)
			if err != nil {
				return err
			}
			if _, err := sh.acjs.PublishAsync(events.SubjectSubmit, data, jetstream.WithMsgID(turn)); err != nil {
				return err
			}
			if i%500 == 499 || i == count-1 {
				select {
				case <-sh.acjs.PublishAsyncComplete():
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		return nil
	}
	slowScript := &model.Script{Responses: []model.ScriptResponse{{DelayMs: 120_000, Text: "slow"}}}
	if err := pub("slow", slow, slowScript); err != nil {
		return err
	}
	return pub("quick", n, &model.Script{Responses: []model.ScriptResponse{{Text: "quick"}}})
}

// queued is how many of a's submissions wait in its inbox.
func (sh *tenantShape) queued(ctx context.Context) (uint64, error) {
	c, err := sh.aajs.Consumer(ctx, "JETLOOP_INBOX", "orchestrator")
	if err != nil {
		return 0, err
	}
	ci, err := c.Info(ctx)
	if err != nil {
		return 0, err
	}
	return ci.NumPending + uint64(ci.NumAckPending), nil
}

// tenancyTable prints the multi-tenant figures.
func (r *Result) tenancyTable(w io.Writer) {
	t := r.Tenancy
	if t == nil || !r.ran("tenants") {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(cells ...string) { fmt.Fprintln(tw, strings.Join(cells, "\t")) }
	row("tenants (deploy/tenants, sync always)", "value", "how")
	row("-------------------------------------", "-----", "---")
	single, tenant := median(t.SingleStepP50Ms), median(t.TenantStepP50Ms)
	row("sequential step p50: single tenant / tenant b", fmt.Sprintf("%.3f / %.3f ms (%+.0f%%)", single, tenant, 100*(tenant/single-1)),
		fmt.Sprintf("medians of %d alternated rounds: %s / %s", len(t.SingleStepP50Ms), floats(t.SingleStepP50Ms), floats(t.TenantStepP50Ms)))
	row("b's turns idle p50 / max", fmt.Sprintf("%.1f / %.1f ms", t.IdleTurnP50Ms, t.IdleTurnMaxMs), fmt.Sprintf("%d two-step turns submitted at once", t.BTurns))
	if len(t.RolesTurnP50Ms) > 0 {
		row("b's turns under a's roles / idle p50", fmt.Sprintf("%.1f / %.1f ms (%.2f×)", median(t.RolesTurnP50Ms), median(t.RolesIdleP50Ms), t.rolesRatio()),
			fmt.Sprintf("medians of %d alternated rounds (%s / %s), ratio the median of the rounds'; max %.1f ms; a's viewer and client %.0f reads/s (bus.Tail from the first message, %d subscriptions held), its toolworker %.0f %d-byte presence puts/s; CPU meanwhile: server %.2f, this process %.2f cores",
				len(t.RolesTurnP50Ms), floats(t.RolesTurnP50Ms), floats(t.RolesIdleP50Ms), t.RolesTurnMaxMs, t.RolesReadsPerS, t.RolesSubs, t.RolesPutsPerS, bus.WorkerValueMax,
				t.RolesServerCores, t.RolesDriverCores))
	}
	row("b's turns under a's flood p50 / max", fmt.Sprintf("%.1f / %.1f ms", t.FloodTurnP50Ms, t.FloodTurnMaxMs),
		fmt.Sprintf("a queued %d submissions and %d two-minute model calls first; %d still queued after", t.FloodSubmitted, t.FloodSlowCalls, t.FloodLeftQueued))
	_ = tw.Flush()
	fmt.Fprintln(w)
}

func floats(xs []float64) string {
	var s []string
	for _, x := range xs {
		s = append(s, strconv.FormatFloat(x, 'f', 3, 64))
	}
	return strings.Join(s, " ")
}

// tenancyRatio is b's turn p50 under a's flood over idle.
func (r *Result) tenancyRatio() string {
	if r.Tenancy == nil || r.Tenancy.IdleTurnP50Ms == 0 {
		return ""
	}
	return fmt.Sprintf("%.1f× (%.1f / %.1f ms)", r.Tenancy.FloodTurnP50Ms/r.Tenancy.IdleTurnP50Ms, r.Tenancy.FloodTurnP50Ms, r.Tenancy.IdleTurnP50Ms)
}

// rolesRatio is the roles' ratio as the targets print it.
func (r *Result) rolesRatio() string {
	if r.Tenancy == nil || len(r.Tenancy.RolesIdleP50Ms) == 0 {
		return ""
	}
	t := r.Tenancy
	return fmt.Sprintf("%.2f× (%.1f / %.1f ms)", t.rolesRatio(), median(t.RolesTurnP50Ms), median(t.RolesIdleP50Ms))
}

// rolesRatio is b's turn p50 under a's roles' load over idle: the median
// of the rounds' ratios, each loaded burst over the idle one just before
// it, so that what else the machine does between rounds cancels out.
func (t *Tenancy) rolesRatio() float64 {
	var rs []float64
	for i, loaded := range t.RolesTurnP50Ms {
		if i < len(t.RolesIdleP50Ms) && t.RolesIdleP50Ms[i] > 0 {
			rs = append(rs, loaded/t.RolesIdleP50Ms[i])
		}
	}
	return median(rs)
}

// storageName is a storage as streams apply --jobs-storage names it.
func storageName(s jetstream.StorageType) string {
	if s == jetstream.MemoryStorage {
		return "memory"
	}
	return "file"
}
