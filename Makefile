# gojob developer tasks. `make help` lists them.
GO      ?= go
PKGS    := ./...
BIN     := bin/gojob

.PHONY: help build install test test/unit test/race deps lint vet fmt bench fuzz chaos tidy verify fixtures

help: ## Show this help
	@grep -E '^[a-zA-Z/_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-12s %s\n", $$1, $$2}'

build: ## Build bin/gojob
	$(GO) build -o $(BIN) ./cmd/gojob

install: ## Install gojob into $(go env GOPATH)/bin (or $GOBIN); the first build takes about a minute
	@echo "building and installing gojob (the first build downloads and compiles its dependencies: about a minute)..."
	$(GO) install ./cmd/gojob
	@bin=$$($(GO) env GOBIN); [ -n "$$bin" ] || bin=$$($(GO) env GOPATH)/bin; \
	echo "installed $$bin/gojob"; \
	case ":$$PATH:" in *":$$bin:"*) ;; *) echo "note: $$bin is not on your PATH; add it: export PATH=\"$$bin:\$$PATH\"";; esac

deps: ## Install what the tests need (redis-server, Ruby Sidekiq 6.4.1) when missing
	bash scripts/deps.sh

test: deps lint ## Lint, then run every test (unit, fuzz seeds, examples, real Redis, Ruby compat) with the race detector
	$(GO) test -race -count=1 -timeout 30m $(PKGS)

test/unit: ## Fast tests only (no Ruby compat tests)
	$(GO) test -count=1 -short $(PKGS)

test/race: deps ## Same as test
	$(GO) test -race -count=1 $(PKGS)

vet: ## go vet
	$(GO) vet $(PKGS)

fmt: ## gofmt -w
	gofmt -w .

lint: ## Fail on gofmt, go vet or go mod tidy drift
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run make tidy"; exit 1; }

bench: ## Go benchmarks
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

chaos: deps ## SIGKILL gojob work 20 times during a 100,000-job drain; every job runs, only jobs in flight run twice
	GOJOB_CHAOS_JOBS=100000 GOJOB_CHAOS_KILLS=20 GOJOB_CHAOS_CONCURRENCY=25 \
		$(GO) test -count=1 -timeout 60m -run TestKillDuringDrainLosesNoJob -v ./cli/

fuzz: ## Fuzz the payload round trip for 60s
	$(GO) test -run '^$$' -fuzz FuzzJobRoundTrip -fuzztime 60s ./sidekiq/wire/

fixtures: deps ## Regenerate testdata/ruby-fixtures: capture Ruby Sidekiq 6.4.1, cut 7.3.10 from its capture, write 8.1.7
	bash testdata/ruby-fixtures/capture.sh
	ruby testdata/ruby-fixtures/captured_7_3_10.rb
	ruby testdata/ruby-fixtures/handwritten.rb

tidy: ## go mod tidy
	$(GO) mod tidy

verify: lint test ## lint + test
