# gojob developer tasks. `make help` lists them.
GO      ?= go
PKGS    := ./...
BIN     := bin/gojob

# make release: the version stamped into the binaries (VERSION=v0.1.0 on the
# command line overrides git describe), the platforms and the output dir.
ifeq ($(origin VERSION),undefined)
VERSION := $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
endif
PLATFORMS := linux/amd64 linux/arm64
DIST      := dist
STAMP     := -X github.com/gojob/gojob/internal/buildinfo.version=$(VERSION)
LDFLAGS   := -s -w $(STAMP)

.PHONY: help build install test test-stress test/unit test/race deps lint vet fmt bench fuzz chaos tidy verify fixtures release docker

help: ## Show this help
	@grep -E '^[a-zA-Z/_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-12s %s\n", $$1, $$2}'

build: ## Build bin/gojob, stamped with VERSION (git describe)
	$(GO) build -ldflags '$(STAMP)' -o $(BIN) ./cmd/gojob

install: ## Install gojob into $(go env GOPATH)/bin (or $GOBIN); the first build takes about a minute
	@echo "building and installing gojob (the first build downloads and compiles its dependencies: about a minute)..."
	$(GO) install -ldflags '$(STAMP)' ./cmd/gojob
	@bin=$$($(GO) env GOBIN); [ -n "$$bin" ] || bin=$$($(GO) env GOPATH)/bin; \
	echo "installed $$bin/gojob"; \
	case ":$$PATH:" in *":$$bin:"*) ;; *) echo "note: $$bin is not on your PATH; add it: export PATH=\"$$bin:\$$PATH\"";; esac

deps: ## Install what the tests need (redis-server, Ruby Sidekiq 6.4.1) when missing
	bash scripts/deps.sh

test: deps lint ## Lint, then run every test (unit, fuzz seeds, examples, real Redis, Ruby compat) with the race detector
	$(GO) test -race -count=1 -timeout 30m $(PKGS)

test-stress: deps ## Run the tests beside two busy loops per core (ARGS="-count=3 -run X ./pkg/" narrows them)
	bash scripts/test-stress.sh $(ARGS)

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

fixtures: deps ## Regenerate testdata/ruby-fixtures: capture Ruby Sidekiq 6.4.1, cut 7.3.10 and 8.1.7 from their captures
	bash testdata/ruby-fixtures/capture.sh
	ruby testdata/ruby-fixtures/captured_7_3_10.rb
	ruby testdata/ruby-fixtures/captured_8_1_7.rb

release: ## Static binaries for linux/amd64 and linux/arm64 in dist/ with SHA256SUMS (VERSION=v0.1.0 overrides git describe)
	@rm -rf $(DIST) && mkdir -p $(DIST)
	@for p in $(PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; out=$(DIST)/gojob-$(VERSION)-$$os-$$arch; \
		echo "building $$out"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -buildvcs=false -ldflags '$(LDFLAGS)' -o $$out ./cmd/gojob || exit 1; \
	done
	@cd $(DIST) && if command -v sha256sum >/dev/null; then sha256sum gojob-*; else shasum -a 256 gojob-*; fi > SHA256SUMS
	@cat $(DIST)/SHA256SUMS

docker: ## Build the container image gojob:VERSION (Dockerfile: static binary, distroless, non-root)
	docker build --build-arg VERSION=$(VERSION) -t gojob:$(VERSION) .

tidy: ## go mod tidy
	$(GO) mod tidy

verify: lint test ## lint + test
