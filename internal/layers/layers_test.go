package layers_test

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/jetloop/jetloop/"

// deps maps each of the module's packages to everything it links.
func deps(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Deps " "}}`, module+"...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	m := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) > 0 {
			m[f[0]] = f[1:]
		}
	}
	return m
}

// TestLayering fails when a package links what its layer must not: the
// tool worker and the public packages never the embedded server or a model
// SDK (a user's worker would carry both), the tool worker never the
// machines, the orchestrator binary never the CLI, the I/O-free core never
// the transport, the web view never the CLI that serves it, the timelines
// and tenant supervision never what they lay out or supervise, no lower
// layer an upper one, and no package but a test the internal test kit.
func TestLayering(t *testing.T) {
	all := deps(t)
	rules := []struct {
		pkgs      []string
		forbidden []string
		why       string
	}{
		{
			pkgs:      []string{"cmd/toolworker", "client", "client/workflowfile", "worker", "internal/bus", "internal/tools", "internal/tenants"},
			forbidden: []string{"github.com/nats-io/nats-server/", "github.com/openai/", "github.com/anthropics/", module + "internal/model", module + "internal/orchestrator", module + "internal/cli"},
			why:       "what runs tools or embeds jetloop in a user's program links neither a server nor a model",
		},
		{
			pkgs:      []string{"internal/fsm", "internal/workflow", "internal/machine", "internal/events", "internal/agents"},
			forbidden: []string{"github.com/nats-io/", module + "internal/bus", module + "internal/orchestrator", module + "internal/cli", module + "internal/model"},
			why:       "the machines and the wire types do no I/O",
		},
		{
			pkgs:      []string{"client", "worker", "cmd/toolworker", "cmd/orchestrator", "cmd/jetloop"},
			forbidden: []string{module + "jetlooptest", module + "internal/testkit"},
			why:       "the test kits are for tests: no program links them",
		},
		{
			pkgs:      []string{"cmd/orchestrator"},
			forbidden: []string{module + "internal/cli", module + "internal/ui", module + "internal/bench"},
			why:       "the orchestrator binary runs turns, not the CLI, its web UI or the bench harness",
		},
		{
			pkgs:      []string{"cmd/toolworker", "worker", "internal/bus", "internal/tools"},
			forbidden: []string{module + "internal/fsm", module + "internal/workflow", module + "internal/logstore", "github.com/looplab/fsm"},
			why:       "what runs tools moves messages and folds no log: neither machine is linked (internal/logstore folds)",
		},
		{
			pkgs: []string{"client", "worker"},
			forbidden: []string{"google.golang.org/grpc", "github.com/prometheus/", "go.opentelemetry.io/otel/sdk",
				"go.opentelemetry.io/otel/exporters/", "go.opentelemetry.io/proto/", module + "internal/metrics", module + "internal/tracing"},
			why: "observability enters the public packages through their options (small interfaces, the OpenTelemetry API); exporters are the commands'",
		},
		{
			pkgs:      []string{"internal/orchestrator", "internal/bus", "internal/turnlog", "internal/tenants", "client", "client/workflowfile", "worker"},
			forbidden: []string{module + "internal/cli", module + "cmd/"},
			why:       "nothing below the CLI imports it",
		},
		{
			pkgs:      []string{"internal/ui", "internal/deadletter"},
			forbidden: []string{module + "internal/cli", module + "internal/orchestrator", module + "cmd/"},
			why:       "the CLI serves the web view, not the other way round, and neither runs a turn",
		},
		{
			pkgs:      []string{"internal/timeline"},
			forbidden: []string{"github.com/nats-io/", module + "internal/bus", module + "internal/turnlog", module + "internal/logstore", module + "internal/orchestrator", module + "internal/cli", module + "client"},
			why:       "the timelines lay out the logs they are given: they read no stream and run no turn",
		},
		{
			pkgs:      []string{"internal/tenants"},
			forbidden: []string{module + "internal/tools", module + "internal/fsm", module + "internal/workflow", module + "internal/logstore", module + "client", module + "worker"},
			why:       "tenant supervision runs what its command gives it: the orchestrator and the tool worker both link it",
		},
	}
	for p, linked := range all {
		if strings.HasPrefix(p, module+"internal/testkit") {
			continue
		}
		for _, d := range linked {
			if strings.HasPrefix(d, module+"internal/testkit") {
				t.Errorf("%s links %s: internal/testkit is for tests; a package that is not one never imports it", strings.TrimPrefix(p, module), d)
			}
		}
	}
	for _, r := range rules {
		for _, p := range r.pkgs {
			linked, ok := all[module+p]
			if !ok {
				t.Errorf("%s: not in the module", p)
				continue
			}
			for _, d := range linked {
				for _, f := range r.forbidden {
					if strings.HasPrefix(d, f) {
						t.Errorf("%s links %s: %s", p, d, r.why)
					}
				}
			}
		}
	}
}

// TestNoMethodReflection: the orchestrator and the tool worker, built as
// make build and make release build them (-tags grpcnotrace), link nothing
// that calls reflect.Value.MethodByName or Method. One such call reachable
// (text/template's field evaluation, through x/net/trace's debug pages)
// makes the linker keep every exported method of every type the binary
// links, and the binary far bigger.
func TestNoMethodReflection(t *testing.T) {
	for _, p := range []string{"cmd/orchestrator", "cmd/toolworker"} {
		cmd := exec.Command("go", "list", "-tags", "grpcnotrace", "-deps", module+p)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list: %v\n%s", err, stderr.String())
		}
		for line := range strings.Lines(string(out)) {
			switch d := strings.TrimSpace(line); d {
			case "text/template", "html/template", "golang.org/x/net/trace":
				t.Errorf("%s links %s: the linker then keeps every exported method (see the Makefile's TAGS)", p, d)
			}
		}
	}
}
