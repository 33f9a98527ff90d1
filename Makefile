# jetloop: durable agent loops on NATS JetStream.
GO      ?= go
BIN     := bin
GOFLAGS ?=
export GOFLAGS

.PHONY: all build release test fuzz chaos demo demo-workflow demo-subagents bench nats vet fmt diagram npm-deps

all: build

# grpcnotrace: gRPC, linked through the OTLP trace exporter, otherwise
# imports golang.org/x/net/trace, whose init reaches html/template, whose
# reflect.Value.MethodByName makes the linker keep every exported method of
# every reachable type (the model SDKs have thousands): the orchestrator
# links 84 MB of them stripped, 52 MB without. jetloop itself still links
# html/template (replay --html).
TAGS ?= grpcnotrace

build:
	$(GO) build -tags $(TAGS) -o $(BIN)/ ./cmd/...

# Release binaries: no symbol table or DWARF (-s -w), no local paths
# (-trimpath), the commit stamped for --version.
release:
	$(GO) build -tags $(TAGS) -trimpath -buildvcs=auto -ldflags="-s -w" -o $(BIN)/ ./cmd/...

test: npm-deps
	$(GO) mod download
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) test -race -count=1 -timeout 20m ./...
	$(MAKE) fuzz

# Every hand-written decoder and fast path, fuzzed for a bounded number of
# inputs against encoding/json and the schemas (go test takes one -fuzz
# target per package at a time): a few seconds each here. A count, not a
# duration: Go 1.26's coordinator can fail a duration-bound run with a bare
# "context deadline exceeded" as its time runs out on a loaded machine,
# having found nothing (go.dev/issue/75804, fixed in Go 1.27). What a run
# finds is written to the package's testdata/fuzz: commit it, and every
# later go test replays it.
FUZZTIME ?= 30000x
FUZZ := \
	./internal/events:FuzzEnvelopeCodec \
	./internal/events:FuzzAppendEnvelope \
	./internal/events:FuzzEachField \
	./internal/events:FuzzEachElement \
	./internal/events:FuzzEventGroup \
	./internal/orchestrator:FuzzDecodeToolResult \
	./internal/orchestrator:FuzzDecodeModelResult

fuzz:
	@set -e; for t in $(FUZZ); do \
		echo "fuzz $${t#*:} ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$${t#*:}\$$" -fuzztime $(FUZZTIME) "$${t%%:*}"; \
	done

# The chaos soak (docs/reliability.md): a 3-node cluster on filesystems
# that forget what was not fsynced, two orchestrators and three tool
# workers under a steady load, and faults drawn from a seed for DURATION.
# It prints the seed (SEED= replays a run) and a table of what happened.
# It needs FUSE (/dev/fuse, root). make test runs a short one.
DURATION ?= 5m
SEED ?=

chaos:
	CHAOS_DURATION=$(DURATION) CHAOS_SEED=$(SEED) $(GO) test -race -count=1 -timeout 0 -run '^TestChaos$$' -v ./internal/blackbox/

demo:
	$(GO) run ./cmd/jetloop demo

# The outer loop: a three-task workflow (examples/workflow) on an embedded server.
demo-workflow:
	$(GO) run ./cmd/jetloop demo --agents examples/workflow/AGENTS.md --workflow examples/workflow/refactor.yaml

# Subagents: a Lead that hands research to a Researcher and the change to a
# Coder (examples/subagents), each child's trace nested under its call.
demo-subagents:
	$(GO) run ./cmd/jetloop demo --agents examples/subagents/AGENTS.md --agent Lead --input "Document the hard step cap"

# One line per benchmark; each prints its own table (BENCHMARKS.md). --deployed
# adds the deployed shape (nats-server, orchestrator and toolworker as
# processes) beside the in-process figures, then the multi-tenant deployment
# and the same shape on a 3-node loopback cluster (phases tenants, cluster):
# the binaries are built here, as make build does, with the nats-server
# go.mod pins, and passed with --bin.
# BenchmarkSyncsPerStep counts the synced writes of a tool step by stream and
# file, in-process on a FUSE filesystem that counts them (it needs FUSE).
bench:
	$(GO) build -tags $(TAGS) -o $(BIN)/ ./cmd/... github.com/nats-io/nats-server/v2
	$(BIN)/jetloop bench --deployed --bin $(BIN)
	$(GO) test -run '^$$' -bench BenchmarkSyncsPerStep -benchtime 1x ./internal/bench/
	$(GO) test -run '^$$' -bench BenchmarkLogAppends -benchtime 6000x ./internal/bus/
	$(GO) test -run '^$$' -bench BenchmarkToolScaling -benchtime 640x ./internal/blackbox/
	$(GO) test -run '^$$' -bench BenchmarkStartupAfterHistory -benchtime 1x ./internal/orchestrator/

# A standalone server with the production configuration; the version is pinned
# by go.mod's tool directive, so nothing is downloaded by hand.
nats:
	$(GO) tool nats-server -c nats.conf

# What the tests run besides Go, pinned by lock files (node_modules is never
# committed): the real MCP servers the MCP bridge is tested against, and the
# TypeScript example worker. npm ci runs again only when a lock file changes.
# Without npm those tests skip, or fail when CI is set.
NPM_DIRS := internal/tools/testdata/mcp examples/worker-ts

npm-deps: $(addsuffix /node_modules/.package-lock.json,$(NPM_DIRS))

%/node_modules/.package-lock.json: %/package-lock.json
	@if command -v npm >/dev/null; then \
		npm ci --prefix $* --no-audit --no-fund --loglevel=error >/dev/null; \
	else echo "npm not found: the tests that need $* cannot run"; fi
