# byoc — run `make help` for the targets.
SHELL := /bin/bash
GO    ?= go
BIN   := $(CURDIR)/bin
TOOL  := $(GO) tool -modfile=tools/go.mod
DEMO  := $(CURDIR)/.demo

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets.
	@# Colour only on a terminal (and not with NO_COLOR): piped, plain text.
	@if [ -t 1 ] && [ -z "$${NO_COLOR:-}" ]; then on='\033[36m'; off='\033[0m'; else on=; off=; fi; \
	awk -v on="$$on" -v off="$$off" 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %s%-14s%s %s\n", on, $$1, off, $$2}' $(MAKEFILE_LIST)

# What --version prints (internal/buildinfo): the version (git describe;
# the commit when there is no tag), the commit and the commit's date (so
# that a build of one commit is the same build). Override any of them:
# make build VERSION=v1.2.3.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)
DATE    ?= $(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null)
BUILDINFO := github.com/byoc-dev/byoc/internal/buildinfo
LDFLAGS := -X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).commit=$(COMMIT) -X $(BUILDINFO).date=$(DATE)

.PHONY: build
# byoc-plugins serves the heavy built-in component types (terraform,
# image, helm) beside agentd, which looks for it in its own directory.
build: ## Build imsd, agentd, byoc-plugins (agentd's heavy built-in types) and byoc into bin/ (with their version: byoc --version).
	@mkdir -p $(BIN)
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/imsd ./imsd
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/agentd ./agentd
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/byoc-plugins ./plugins/bundle/byoc-plugins
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/byoc ./tui

# The filters pass each line on as it comes: mawk (Debian's awk) reads and
# writes pipes in blocks unless given -W interactive; other awks flush on
# fflush().
AWK_LIVE := $(shell awk -W version 2>/dev/null | grep -q mawk && echo 'awk -W interactive' || echo awk)
PROGRESS_TERM = /[ :]/ {print (n ? "\n" : "") $$0; fflush(); next} {n++; printf "\r\033[K    %d packages compiled: %s", n, substr($$0, 1, 60); fflush()} END {if (n) printf "\r\033[K    %d packages compiled\n", n}
PROGRESS_PIPED = /[ :]/ {print; fflush(); next} {print "    compiled " $$0; fflush()}

# progress-filter is build-progress's filter for a pipe, on its own (e2e
# TestMakeProgressIsLive feeds it).
.PHONY: progress-filter
progress-filter:
	@$(AWK_LIVE) '$(PROGRESS_PIPED)'

# build-progress is build for people waiting on it (make demo): go build -v
# names each package as it compiles it, shown as a line each when piped and
# as one line counting up on a terminal; compiler errors print in full.
.PHONY: build-progress
build-progress:
	@echo "==> building imsd, agentd, byoc-plugins and byoc into $(BIN) (a first build compiles every dependency: minutes)"
	@mkdir -p $(BIN)
	@set -o pipefail; $(GO) build -v -ldflags '$(LDFLAGS)' -o $(BIN)/ ./imsd ./agentd ./plugins/bundle/byoc-plugins ./tui 2>&1 | \
	if [ -t 1 ]; then $(AWK_LIVE) '$(PROGRESS_TERM)'; else $(AWK_LIVE) '$(PROGRESS_PIPED)'; fi
	@mv -f $(BIN)/tui $(BIN)/byoc
	@echo "==> built $(BIN)/imsd, $(BIN)/agentd, $(BIN)/byoc-plugins and $(BIN)/byoc"

.PHONY: generate
generate: ## Regenerate the Go code and the API reference (docs/reference/api) from rpc/, and the app config JSON Schemas (committed).
	rm -rf rpc/gen docs/reference/api
	$(TOOL) buf generate
	$(GO) run ./schema/app/jsonschema/internal/genschema schema/app/jsonschema

.PHONY: check-generate
check-generate: generate ## Fail when `make generate` changes anything.
	@git add -N rpc/gen docs/reference/api schema/app/jsonschema >/dev/null 2>&1 || true
	@if ! git diff --quiet --exit-code -- rpc/gen docs/reference/api schema/app/jsonschema; then \
		echo "generated code is out of date: run 'make generate' and commit" >&2; \
		git diff --stat -- rpc/gen docs/reference/api schema/app/jsonschema >&2; exit 1; fi

.PHONY: check-deps
check-deps: ## Import rules of ARCHITECTURE.md, package docs, and each binary's committed deps.txt.
	$(GO) test -count=1 ./internal/archcheck

.PHONY: check-docs
check-docs: ## Docs check: every link resolves, no page over 600 lines (README 300), every byoc command shown exists, the CLI reference is current.
	$(GO) test -count=1 ./internal/docscheck
	$(GO) test -count=1 -run '^(TestDocs.*|TestCLIReference)$$' ./tui/cli

.PHONY: docs
docs: ## Regenerate the CLI reference (docs/reference/cli) from the command tree.
	$(GO) test -count=1 -run '^TestCLIReference$$' ./tui/cli -update-cli-reference

.PHONY: update-deps
update-deps: ## Rewrite imsd/deps.txt, agentd/deps.txt and tui/deps.txt (review the diff).
	$(GO) test -count=1 ./internal/archcheck -run TestBinaryDeps -update

.PHONY: check-breaking
check-breaking: ## buf breaking (FILE rules) against the last release tag, else the previous commit.
	@scripts/check-breaking.sh

.PHONY: lint
lint: ## gofmt, go vet, staticcheck and buf lint.
	@unformatted="$$(gofmt -l $$(git ls-files '*.go' | grep -v '^rpc/gen/'))"; \
	if [ -n "$$unformatted" ]; then echo "gofmt -w these files:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(TOOL) staticcheck ./...
	$(TOOL) buf lint
	@# bench/river is a module of its own (River stays out of go.mod): vetted here too.
	cd bench/river && $(GO) vet ./... && $(GO) tool -modfile=../../tools/go.mod staticcheck ./...
	@# tools/tfgoogleschema (the hashicorp/google stand-in) is a module of its own too.
	cd tools/tfgoogleschema && $(GO) vet ./... && $(GO) tool -modfile=../go.mod staticcheck ./...

.PHONY: test-short
test-short: ## Fast tier: go test -short -race.
	$(GO) test -short -race -count=1 ./...

.PHONY: test-full
test-full: terraform-mirror kube-apiserver-ci ## Full tier: tests that start real servers (PostgreSQL, processes, terraform, kube-apiserver).
	$(GO) test -count=1 -timeout 30m ./...
	cd tools/tfgoogleschema && $(GO) test -count=1 ./...

# The replica tier runs inside test-full (e2e/fault, in parallel with the
# rest); this target runs only it.
.PHONY: test-replicas
test-replicas: ## Only the replica tier: imsd replicas on one PostgreSQL behind a balancer, killed and cut off from the database (part of test-full).
	$(GO) test -count=1 -timeout 15m -run 'Replica' ./e2e/fault

.PHONY: terraform-mirror
terraform-mirror: ## Build the Terraform provider mirror the terraform type's tests use (.cache/terraform-mirror; reused).
	@scripts/terraform-mirror.sh >/dev/null

# The helm type's integration tier runs a real kube-apiserver built from
# the Go module proxy (scripts/build-kube-apiserver.sh, cached in .cache/).
# Elsewhere that tier skips without it; under CI=true it must run, so the
# full tier waits for the build (.ci/run starts it in the background
# early; a second caller waits for the first).
.PHONY: kube-apiserver kube-apiserver-ci
kube-apiserver: ## Build kube-apiserver for the helm tests into .cache/kube (minutes; reused when present).
	@scripts/build-kube-apiserver.sh
kube-apiserver-ci:
	@if [ "$${CI:-}" = true ]; then echo "==> waiting for kube-apiserver (scripts/build-kube-apiserver.sh)"; scripts/build-kube-apiserver.sh >/dev/null; fi

# The app `byoc app init` writes, end to end on this machine (docs/operator/getting-started.md,
# "Quick start: the example app"): terraform on PATH, docker-registry and
# etcd-server from apt, the mirror and kube-apiserver built once here.
.PHONY: example-app
example-app: terraform-mirror kube-apiserver ## Provision and deprovision the whole app `byoc app init` writes (e2e TestExampleApp; builds the mirror and kube-apiserver first).
	$(GO) test -count=1 -v -run 'TestExampleApp$$' ./e2e

# Fuzz targets run briefly by `make test`, as package:FuzzName pairs (go
# test -fuzz takes one target of one package at a time). Add yours here;
# each keeps a small committed seed corpus in testdata/fuzz/FuzzName.
FUZZ_TARGETS := \
	./imsd/agentwire:FuzzSniff \
	./imsd/agentwire:FuzzServeConn \
	./plugins/sdk/configschema:FuzzSchema \
	./plugins/sdk/redact:FuzzStream \
	./internal/labels:FuzzParse \
	./internal/window:FuzzParse \
	./schema/app/config:FuzzDecode \
	./schema/app/load:FuzzParse \
	./schema/app/cron:FuzzScheduleAgainstRobfig \
	./schema/app/cron:FuzzScheduleTokens \
	./imsd/agentapi:FuzzConfigDigestBothSides \
	./agentd/agent:FuzzSeenLine \
	./agentd/agent:FuzzEnvelopeBody \
	./imsd/store:FuzzEncodeMap \
	./internal/ocicopy:FuzzParseReference \
	./imsd/registry:FuzzParseScope \
	./rpc/agentproto:FuzzParseGrantExchangePassword \
	./rpc/agentproto:FuzzCheckConfig \
	./rpc/agentproto:FuzzJobBatchProof \
	./imsd/operatorapi:FuzzEnqueueConfig \
	./imsd/operatorapi:FuzzShownJob \
	./internal/asciicast:FuzzSafe
FUZZTIME ?= 10s

.PHONY: fuzz-short
fuzz-short: ## Run each fuzz target for FUZZTIME (10s), one at a time (a bare end-of-fuzztime "context deadline exceeded", Go's go.dev/issue/75804, is run again once).
	@GO="$(GO)" FUZZTIME=$(FUZZTIME) scripts/fuzz-short.sh $(FUZZ_TARGETS)

# Example plugins are Go modules of their own, built only against the SDK.
EXAMPLES := $(patsubst %/go.mod,%,$(wildcard plugins/examples/*/go.mod))

.PHONY: test-examples
test-examples: ## Vet and test the example plugins (each its own module).
	@set -e; for d in $(EXAMPLES); do \
		echo "== $$d"; \
		(cd $$d && $(GO) vet ./... && $(GO) test -race -count=1 ./...); \
	done

.PHONY: test
test: check-generate check-deps check-docs lint check-breaking test-short test-full test-examples fuzz-short ## Everything CI runs: generated code, architecture, docs, lint, proto compatibility, fast and full tiers, example plugins, short fuzzing.

.PHONY: bench
bench: bench-tools ## Benchmarks: plugin launch, sandbox overhead per step, pickup latency, dispatch throughput, memory per agent, image sync against skopeo/crane/oras (prints figures).
	$(GO) test -run '^$$' -bench Launch -benchtime 50x ./agentd/pluginhost/
	$(GO) test -run '^$$' -bench StepOverhead -benchtime 100x ./plugins/action/sandbox/
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 30m ./bench/...

.PHONY: bench-tools
bench-tools: ## Install the image benchmark's peers at pinned versions (crane v0.22.1, oras v1.3.1) into .cache/bench-tools/bin.
	@scripts/bench-tools.sh

.PHONY: bench-image
bench-image: bench-tools ## Only the image sync benchmark (byoc's copy, skopeo, crane, oras; registry to registry on loopback).
	$(GO) test -run '^$$' -bench ImageSync -benchtime 1x -timeout 30m ./bench/imagesync/

# River's own module (bench/river/go.mod) keeps it out of byoc's go.mod.
.PHONY: bench-river
bench-river: ## byoc's PostgreSQL dispatch against River v0.51.1 on one throwaway PostgreSQL, alternating rounds (BYOC_RIVER_ROUNDS, 3; BYOC_BENCH_JOBS, 50,000); prints both and byoc/River.
	cd bench/river && $(GO) test -run '^$$' -bench RiverVsByoc -benchtime 1x -timeout 60m .

.PHONY: demo
demo: build-progress ## Build (showing progress), start imsd (SQLite) and an enrolled agent in the background, run a job, follow its logs.
	@BYOC_DEMO_DIR=$(DEMO) BYOC_DEMO_BIN=$(BIN) scripts/demo.sh start

.PHONY: demo-stop
demo-stop: ## Stop what `make demo` started.
	@BYOC_DEMO_DIR=$(DEMO) BYOC_DEMO_BIN=$(BIN) scripts/demo.sh stop

.PHONY: clean
clean: ## Remove build output and demo state.
	rm -rf $(BIN) $(DEMO)
