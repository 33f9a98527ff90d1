# jetloop: durable agent loops on NATS JetStream.
GO      ?= go
BIN     := bin
GOFLAGS ?=
export GOFLAGS

.PHONY: all build test demo bench nats vet fmt diagram mcp-servers

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

test: mcp-servers
	$(GO) mod download
	npm ci --prefix examples/worker-ts --no-audit --no-fund --loglevel=error
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) test -race -count=1 -timeout 20m ./...

demo:
	$(GO) run ./cmd/jetloop demo

bench:
	@echo "make bench: the benchmark suite is not built yet (issue: Benchmarks); nothing measured."

# A standalone server with the production configuration; the version is pinned
# by go.mod's tool directive, so nothing is downloaded by hand.
nats:
	$(GO) tool nats-server -c nats.conf

# The real MCP servers the MCP bridge's tests run against, pinned by the lock
# file in internal/tools/testdata/mcp (node_modules is not committed). npm ci
# runs again only when the lock file changes. Without npm the MCP tests skip,
# or fail when CI is set.
MCP_DIR := internal/tools/testdata/mcp

mcp-servers: $(MCP_DIR)/node_modules/.package-lock.json

$(MCP_DIR)/node_modules/.package-lock.json: $(MCP_DIR)/package-lock.json
	@if command -v npm >/dev/null; then \
		npm ci --prefix $(MCP_DIR) --no-audit --no-fund --loglevel=error >/dev/null; \
	else echo "npm not found: the MCP bridge's tests cannot run"; fi
