# jetloop: durable agent loops on NATS JetStream.
GO      ?= go
BIN     := bin
GOFLAGS ?=
export GOFLAGS

.PHONY: all build test demo bench nats vet fmt diagram

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

test:
	$(GO) mod download
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) test -race -count=1 -timeout 20m ./...

demo:
	$(GO) run ./cmd/jetloop demo

# One line per benchmark; each prints its own table (BENCHMARKS.md).
bench:
	$(GO) run ./cmd/jetloop bench

# A standalone server with the production configuration; the version is pinned
# by go.mod's tool directive, so nothing is downloaded by hand.
nats:
	$(GO) tool nats-server -c nats.conf
