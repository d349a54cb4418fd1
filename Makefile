# qasync: the two commands a fresh machine needs are `make run` and `make test`.
# Everything they install goes into .cache/ (git-ignored).

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

CACHE      := $(CURDIR)/.cache
BIN        := $(CACHE)/bin
ADDR       ?= 127.0.0.1:8080
FUZZTIME   ?= 60000x

# Go modules are downloaded into the project's cache, writable so that
# `make clean` can remove them.
export GOMODCACHE := $(CACHE)/go/mod
export GOFLAGS    := -modcacherw

STACK      := scripts/stack.sh

# STEP runs one long step so that it is never silent for long: a line with
# what runs and roughly how long it takes, then a progress line every 20 s
# (scripts/step.sh; --go counts go build -v's packages). The times are a
# first run's on a 2-core machine (docs/development.md); later runs take
# seconds.
STEP       := scripts/step.sh

# The Lambda functions (functions/<fn>), built for the provided.al2023
# runtime on arm64 into dist/<fn>/bootstrap and dist/<fn>.zip.
LAMBDA_FNS := submit worker sweeper dlq history
DIST       := dist

# lambda-bundles builds the Lambda functions <pkg>/<fn> of the Go module in
# directory $(1) into $(1)/$(3)/<fn>/bootstrap and $(1)/$(3)/<fn>.zip
# (linux/arm64, static, reproducible): $(call lambda-bundles,<module dir>,<pkg>,<dist>).
define lambda-bundles
go build -o $(BIN)/zipbootstrap ./scripts/zipbootstrap
@for fn in $(LAMBDA_FNS); do \
	mkdir -p $(1)/$(3)/$$fn; \
	(cd $(1) && GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(CURDIR)/$(STEP) --go "building the Lambda bundle $(3)/$$fn (linux/arm64)" \
		"first run: the first one compiles the AWS SDK for arm64, $(T_BUNDLE_FIRST); the others $(T_BUNDLE)" \
		go build -v -tags lambda.norpc -trimpath -ldflags='-s -w -buildid=' -o $(3)/$$fn/bootstrap ./$(2)/$$fn); \
	$(BIN)/zipbootstrap $(1)/$(3)/$$fn/bootstrap $(1)/$(3)/$$fn.zip; \
done
endef

# The AWS Lambda Runtime Interface Emulator runs the real function binaries
# on this machine (make local-cloud, and the tests of shared/internal/localcloud).
RIE_VERSION := v0.0.0-20261030222936-bef5c4ba774d
RIE         := $(BIN)/aws-lambda-rie
LOCAL       := $(CACHE)/local

.PHONY: help run build build-local build-lambda install test test-unit chromium fuzz bench vet fmt-check openapi-lint clean stack-up stack-down stack-test provision rie local-cloud chaos-embedded simulate

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

build: build-local build-lambda ## build the local binary (.cache/bin/qasync) and the Lambda bundles (dist/<fn>.zip)

# The first-run times (seconds on a warm machine after that) that the
# steps announce: measured on a loaded 2-core machine, rounded up
# (docs/development.md).
T_MODULES      := seconds to a minute, 70 MB
T_BUILD        := about 2 to 4 min
T_BUNDLE_FIRST := about 2 min
T_BUNDLE       := seconds
T_RIE          := about 15 s
T_NODE         := about 10 s, 185 MB
T_CDK_CLI      := about 10 s
T_SYNTH        := about 8 min: it compiles the CDK's Go bindings

build-local: ## build the local binary into .cache/bin/qasync
	@$(STEP) "downloading the Go modules of .cache/bin/qasync into .cache/go/mod" "first run: $(T_MODULES); then nothing to do" \
		sh -c 'go list -deps ./cmd/qasync >/dev/null'
	@$(STEP) --go "building .cache/bin/qasync" "first build: $(T_BUILD), it compiles the AWS SDK; then seconds" go build -v -o $(BIN)/qasync ./cmd/qasync

# make install copies the local binary to BINDIR: $GOBIN when set, else
# ~/.local/bin (on PATH in many shells' defaults); BINDIR=DIR picks another.
BINDIR ?= $(or $(shell go env GOBIN),$(HOME)/.local/bin)

install: build-local ## copy the local binary (.cache/bin/qasync) to BINDIR ($GOBIN, else ~/.local/bin): put it on your PATH
	@mkdir -p "$(BINDIR)"
	install -m 0755 $(BIN)/qasync "$(BINDIR)/qasync"
	@case ":$$PATH:" in *":$(BINDIR):"*) echo "installed $(BINDIR)/qasync";; \
	  *) echo "installed $(BINDIR)/qasync; $(BINDIR) is not on your PATH: export PATH=\"$(BINDIR):\$$PATH\"";; esac

build-lambda: ## build each Lambda function into dist/<fn>/bootstrap and dist/<fn>.zip (linux/arm64) and print the sizes
	$(call lambda-bundles,.,functions,$(DIST))

# make run and make local-cloud serve the diag.drill fault drill
# (diag.enabled), which deployments leave off.
#
# make run turns the operator routes (cancel, re-drive, the console's
# sign-in) on with a development token: scripts/devtoken.sh makes a random
# one on the first run in DEV_TOKEN (mode 0600, in the git-ignored data
# directory) and later runs reuse it. It reaches qasync serve in the
# environment, never on a command line (which ps shows to every user);
# QASYNC_ADMIN_TOKEN_FILE tells serve where it is, and serve's startup
# lines name that file for signing in. A PIPELINE_ORCHESTRATOR_ADMIN_TOKEN
# of your own wins.
DEV_TOKEN := .qasync/admin-token

run: build-local ## serve the API, console, workers and sweeper on ADDR (127.0.0.1:8080), data in .qasync/, operator token in .qasync/admin-token
	@scripts/devtoken.sh $(DEV_TOKEN)
	PIPELINE_ORCHESTRATOR_SWEEP_INTERVAL=$${PIPELINE_ORCHESTRATOR_SWEEP_INTERVAL:-1s} \
	PIPELINE_ORCHESTRATOR_DIAG_ENABLED=$${PIPELINE_ORCHESTRATOR_DIAG_ENABLED:-true} \
	PIPELINE_ORCHESTRATOR_ADMIN_TOKEN="$${PIPELINE_ORCHESTRATOR_ADMIN_TOKEN:-$$(cat $(DEV_TOKEN))}" \
	QASYNC_ADMIN_TOKEN_FILE=$(DEV_TOKEN) \
	exec $(BIN)/qasync serve --addr $(ADDR)

test: build-lambda vet fmt-check openapi-lint stack-test test-unit fuzz cdk-test examples-test ## everything CI runs: vet, gofmt, the OpenAPI lint, the stack script's test, all tests with -race against the local AWS stack, a short fuzz, the CDK tests, the example service

# The stack is started for the tests and stopped afterwards, also on failure.
test-unit: build-local rie chromium
	QASYNC_REQUIRE_STACK=1 QASYNC_BIN=$(BIN)/qasync $(STACK) run sh -c '\
	  go test -race -count=1 -timeout 12m ./... && \
	  QASYNC_CLITEST_STATE=dynamo go test -race -count=1 $(CONTRACT_PKGS)'   # the HTTP contract's client, CLI and serve tests again, on DynamoDB + SQS
	QASYNC_ENGINE_PROVIDER=embedded go test -race -count=1 ./shared/internal/engine/   # the engine's tests again, on the embedded store
	QASYNC_ENGINE_PROVIDER=dynamo go test -race -count=1 ./shared/internal/engine/   # and on the DynamoDB adapter against the model of the DynamoDB API
	go test -count=1 -run '^TestSimulateBudget$$' -v ./shared/internal/sim/ | grep -v -e '^=== '   # the day's seeds of the simulation on every store (no race detector: it slows a simulation tenfold)
	QASYNC_CLITEST_STATE=memory go test -race -count=1 $(CONTRACT_PKGS)   # and the contract's, on the memory providers

# The packages whose tests run the HTTP contract against a real server
# (shared/internal/clitest; QASYNC_CLITEST_STATE picks its providers).
CONTRACT_PKGS = ./shared/client/ ./shared/internal/cli/ ./shared/server/

# The web console's browser test (shared/internal/console) drives headless
# Chromium. Under CI=true (CI runs as root) a missing Chromium is installed
# with apt-get, and the test fails rather than skip without it; elsewhere
# this only says how to install it, and the test skips.
chromium: ## ensure Chromium for the console's browser test (installs it with apt-get under CI=true)
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || [ -n "$${QASYNC_CHROMIUM:-}" ]; then \
		:; \
	elif [ "$${CI:-}" = "true" ]; then \
		echo "chromium: installing with apt-get (CI=true)"; \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; \
	else \
		echo "chromium: not installed; the console's browser test will skip (install: sudo apt-get install -y chromium)"; \
	fi

stack-up: ## install (into .cache/) and start DynamoDB Local (127.0.0.1:28000) and the SQS server (127.0.0.1:28324)
	$(STACK) up
	@$(STACK) env

stack-down: ## stop the local AWS stack
	$(STACK) down

# A few seconds, on random free ports below 32768: failed starts leave
# nothing behind, untrusted pid files are ignored. Then make's other
# helper scripts: the development token, the Node.js check, the step
# progress.
stack-test: ## test scripts/stack.sh (cleanup on failed starts, pid files checked) and make's other helper scripts
	scripts/stack_test.sh
	scripts/scripts_test.sh

provision: build-local ## create the tables and queues on the local stack (make stack-up first)
	eval "$$($(STACK) env)" && $(BIN)/qasync provision

rie: $(RIE) ## install the AWS Lambda Runtime Interface Emulator (pinned) into .cache/bin

$(RIE):
	@GOBIN=$(BIN) $(STEP) --go "installing the AWS Lambda Runtime Interface Emulator into .cache/bin" "first run: $(T_RIE)" \
		go install -v github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@$(RIE_VERSION)

# The serverless topology on this machine, as the synthesized stack
# declares it: `qasync local` runs every function of the template (host
# builds in .cache/local/<fn>/bootstrap) under RIE with its environment,
# timeout and memory, and emulates the HTTP API's routes (IAM-signed
# requests checked against the caller's policy), the SQS and DynamoDB
# stream event source mappings with their settings and the schedule, on
# the local stack (tables and queues named local-*, created when missing),
# each function's AWS calls checked against its role. The template is a
# fresh `make synth` (STAGE=dev), or TEMPLATE=<synthesized template>.
# LOCAL_FLAGS: more flags for qasync local (config flags override the
# template's environment). The stack is stopped on exit if this target
# started it (docs/aws-providers.md).
TEMPLATE    ?=
LOCAL_FLAGS ?=
local-cloud: build-local rie $(if $(TEMPLATE),,synth) ## run the synthesized stack's functions under RIE on ADDR (127.0.0.1:8080), durable on the local stack, IAM enforced
	@for fn in $(LAMBDA_FNS); do go build -tags lambda.norpc -o $(LOCAL)/$$fn/bootstrap ./functions/$$fn; done
	$(STACK) run $(BIN)/qasync local --local-template $(abspath $(or $(TEMPLATE),$(CDK_DIR)/cdk.out/qasync-$(STAGE).template.json)) \
	  --local-addr $(ADDR) --local-bin-dir $(LOCAL) --local-rie $(RIE) $(LOCAL_FLAGS)

# The deterministic simulation (shared/internal/sim): one seed drives
# submitters, workers, sweeper, operators and faults over virtual time on
# each store; it prints the seed, the settings, the faults and the
# invariant table, and fails on any violation (then with the seed and the
# trace of the execution involved). SEED defaults to the clock's seconds:
# every run explores a new one.
SEED         ?= $(shell date +%s)
EXECUTIONS   ?= 300
VIRTUAL_DAYS ?= 30
STORES       ?= memory,embedded,dynamo

simulate: ## the deterministic simulation (SEED, EXECUTIONS, VIRTUAL_DAYS, STORES): seed, faults, invariant table
	@echo "simulate: SEED=$(SEED) EXECUTIONS=$(EXECUTIONS) VIRTUAL_DAYS=$(VIRTUAL_DAYS) STORES=$(STORES)"
	@SIM_SEED=$(SEED) SIM_EXECUTIONS=$(EXECUTIONS) SIM_VIRTUAL_DAYS=$(VIRTUAL_DAYS) SIM_STORES=$(STORES) \
	  go test -count=1 -v -timeout 0 -run '^TestSimulate$$' ./shared/internal/sim/ | grep -v -e '^=== ' -e '^--- PASS' -e '^PASS$$' -e '^ok '

fuzz: ## fuzz the submit handler (FUZZTIME inputs, default 60000x: a few seconds)
	go test -run '^$$' -fuzz '^FuzzSubmit$$' -fuzztime $(FUZZTIME) ./shared/internal/httpapi/

bench: ## report transitions per second of the memory providers on this machine
	go test -run '^$$' -bench Transitions -benchtime 20x ./shared/internal/engine/

# The peer benchmark: the same 3-step durable pipeline on qasync, on
# River (SQLite, and Postgres when one is found or can be started) and on
# Temporal's dev server (when the temporal CLI is installed: make
# temporal-cli bench-peers), each in a child process of its own, printed as
# one Markdown table with the ratios to qasync (bench/README.md). bench/ is
# a Go module of its own, so River's, pgx's, SQLite's and Temporal's
# dependencies stay out of go.mod. Informational: no target gates on its
# figures. BENCH_PEERS_FLAGS passes flags, e.g.
# BENCH_PEERS_FLAGS='-duration 10s -systems qasync,river-sqlite-full -o json'.
BENCH_PEERS_FLAGS ?=
# The Temporal CLI (pinned) whose dev server the temporal-dev row runs; that
# row is skipped without it, bench-peers does not install it.
TEMPORAL_CLI_VERSION := v1.5.1
TEMPORAL_CLI_STAMP   := $(BIN)/.temporal-$(TEMPORAL_CLI_VERSION)

# The engine benchmark (bench/engines): the embedded store's candidate
# engines (bbolt, pebble, SQLite) on the step's write (a conditional row
# update and a queue move in one fsync'd transaction, group commit), one
# table; the README's "Embedded store" section says what it chose and why.
.PHONY: bench-engines
bench-engines: ## embedded store's engine choice: bbolt, pebble and SQLite on the step's fsync'd write, one table
	cd bench && CGO_ENABLED=0 go build -o $(BIN)/bench-engines ./engines
	$(BIN)/bench-engines -writers 1,8,32

.PHONY: bench-peers temporal-cli
bench-peers: ## peer benchmark: qasync vs River (SQLite, Postgres) and Temporal's dev server, same workload, one table (BENCH_PEERS_FLAGS)
	cd bench && CGO_ENABLED=0 go build -o $(BIN)/bench-peers .
	$(BIN)/bench-peers $(BENCH_PEERS_FLAGS)

temporal-cli: $(TEMPORAL_CLI_STAMP) ## install the pinned Temporal CLI (the peer benchmark's dev server) into .cache/bin

$(TEMPORAL_CLI_STAMP):
	GOBIN=$(BIN) go install github.com/temporalio/cli/cmd/temporal@$(TEMPORAL_CLI_VERSION)
	touch $@

# The chaos run (shared/internal/crashtest.RunChaos): CHAOS_EXECUTIONS executions of
# diag.drill and checkout.deliver-order on CHAOS_WORKERS `qasync serve`
# processes sharing fresh tables and queues, a random one SIGKILLed and
# restarted every ~CHAOS_KILL_EVERY (at least CHAOS_MIN_KILLS times), work
# items duplicated and dropped and DynamoDB calls failed by the faults.*
# keys; then it waits for quiescence, checks every invariant and prints one
# table. CHAOS_SEED=<n> repeats a run's inputs; CHAOS_RATE (submits per
# second), CHAOS_DYNAMO_ERROR_RATE, CHAOS_DUPLICATE_RATE, CHAOS_DROP_RATE,
# CHAOS_QUIESCE_TIMEOUT and CHAOS_LOG_DIR are the other knobs. `make test`
# runs the short profile (60 executions, 2 workers) with the HA gate.
CHAOS_EXECUTIONS ?= 1000
CHAOS_WORKERS    ?= 3
CHAOS_KILL_EVERY ?= 3s
CHAOS_MIN_KILLS  ?= 20
CHAOS_RATE       ?= 15

.PHONY: chaos
chaos: build-local ## chaos run: 1000 executions on 3 serve processes, SIGKILLs every ~3 s, faults injected; prints one table (CHAOS_* knobs)
	CHAOS_EXECUTIONS=$(CHAOS_EXECUTIONS) CHAOS_WORKERS=$(CHAOS_WORKERS) CHAOS_KILL_EVERY=$(CHAOS_KILL_EVERY) \
	CHAOS_MIN_KILLS=$(CHAOS_MIN_KILLS) CHAOS_RATE=$(CHAOS_RATE) QASYNC_REQUIRE_STACK=1 QASYNC_BIN=$(BIN)/qasync \
	$(STACK) run go test -count=1 -v -run '^TestChaos$$' -timeout 30m ./shared/internal/crashtest/

chaos-embedded: build-local ## the chaos run on one qasync serve over the embedded store (no AWS stack): CHAOS_EXECUTIONS executions, SIGKILLs every ~CHAOS_KILL_EVERY
	CHAOS_EXECUTIONS=$(CHAOS_EXECUTIONS) CHAOS_KILL_EVERY=$(CHAOS_KILL_EVERY) CHAOS_MIN_KILLS=$(CHAOS_MIN_KILLS) CHAOS_RATE=$(CHAOS_RATE) \
	QASYNC_BIN=$(BIN)/qasync go test -count=1 -v -run '^TestEmbeddedChaos$$' -timeout 30m ./shared/internal/crashtest/

# The durable benchmark (shared/internal/benchdurable): DynamoDB Local's
# conditional-write ceiling, then a burst of BENCH_EXECUTIONS diag.drill
# executions and a steady BENCH_RATE submits/s for BENCH_DURATION through
# each count of `qasync serve` processes in BENCH_PROCESSES (1,2), every
# request to the stack counted by proxies outside the processes. Prints one
# table (BENCH_OUTPUT=json for JSON, BENCH_OUT=<file> to keep it); it never
# fails on a figure. QASYNC_BIN measures another binary; BENCH_WARMUP,
# BENCH_WARMUP_DURATION, BENCH_SERVE_SETTINGS and BENCH_LOG_DIR are read
# from the environment (docs/development.md).
BENCH_EXECUTIONS ?= 300
BENCH_RATE       ?= 10
BENCH_DURATION   ?= 30s
BENCH_PROCESSES  ?= 1,2

# The map burst (TestMapBurst in shared/internal/wiring): one map of MAP_N
# one-step children for each in-flight limit in MAP_IN_FLIGHT on each
# backend in MAP_BACKENDS (memory, embedded, and dynamo: DynamoDB Local and
# the SQS server), each as qasync serve runs it (sweeper, 8 workers). Each
# DynamoDB run gets a stack of its own, started and stopped here: DynamoDB
# Local slows down with every stream record it has kept since it started
# (the execution table has a stream), deleted tables' too, so a second
# 10,000-child map on the same stack measures that instead. Prints one
# Markdown table (also kept in MAP_OUT): the fan-out, first child created
# -> parent SUCCEEDED, children per second; on DynamoDB each item's writes
# and busiest second (the parent row, the group rows, the finished set,
# the hottest item of any table) and per child the write requests, write
# units and SQS requests. MAP_LOG=<file> keeps the runtime's warnings.
# docs/cost.md "Fan-out" holds a run's figures. Informational: it never
# fails on a figure.
MAP_N         ?= 10000
MAP_IN_FLIGHT ?= 100
MAP_BACKENDS  ?= memory,embedded,dynamo
MAP_OUT       ?= $(CACHE)/bench-map.md
MAP_LOG       ?=
comma        := ,

.PHONY: bench-map
bench-map: ## map burst: one map of MAP_N children (MAP_IN_FLIGHT, MAP_BACKENDS); children/s, each item's writes and peak per second on DynamoDB, per-child cost
	@mkdir -p $(dir $(abspath $(MAP_OUT))) && rm -f $(MAP_OUT)
	@for b in $(subst $(comma), ,$(MAP_BACKENDS)); do \
	  for k in $(subst $(comma), ,$(MAP_IN_FLIGHT)); do \
	    stack=; if [ "$$b" = dynamo ]; then stack="$(STACK) run"; fi; \
	    QASYNC_MAP_BURST=$(MAP_N) QASYNC_MAP_IN_FLIGHT=$$k QASYNC_MAP_BACKENDS=$$b QASYNC_MAP_OUT=$(abspath $(MAP_OUT)) \
	    QASYNC_MAP_LOG=$(if $(MAP_LOG),$(abspath $(MAP_LOG))) QASYNC_REQUIRE_STACK=1 \
	      $$stack go test -count=1 -v -run '^TestMapBurst$$' -timeout 2h ./shared/internal/wiring/ || exit 1; \
	  done; \
	done
	@echo; cat $(MAP_OUT)

.PHONY: bench-durable
bench-durable: build-local ## durable benchmark on the local stack: ceiling, burst and steady load through 1 and 2 serve processes, requests per step (BENCH_* knobs)
	BENCH_DURABLE=1 BENCH_EXECUTIONS=$(BENCH_EXECUTIONS) BENCH_RATE=$(BENCH_RATE) BENCH_DURATION=$(BENCH_DURATION) \
	BENCH_PROCESSES=$(BENCH_PROCESSES) QASYNC_REQUIRE_STACK=1 QASYNC_BIN=$${QASYNC_BIN:-$(BIN)/qasync} \
	$(STACK) run go test -count=1 -v -run '^TestBenchDurable$$' -timeout 30m ./shared/internal/benchdurable/

vet:
	go vet ./...

fmt-check:
	@out=$$(gofmt -l cmd shared pipelines functions scripts); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# The OpenAPI document's lint: Redocly CLI (pinned, installed into
# .cache/redocly with npm on first use, as the CDK CLI is) with its
# recommended rules, every warning an error (its recommended-strict
# ruleset). The document linted is the one the server answers GET
# /openapi.json with, written by the httpapi package's route test.
REDOCLY_VERSION := 2.77.0
REDOCLY_HOME    := $(CACHE)/redocly
REDOCLY         := $(REDOCLY_HOME)/node_modules/.bin/redocly
REDOCLY_STAMP   := $(REDOCLY_HOME)/.installed-$(REDOCLY_VERSION)
OPENAPI_OUT     := $(CACHE)/openapi/openapi.json

$(REDOCLY_STAMP):
	rm -rf $(REDOCLY_HOME) && mkdir -p $(REDOCLY_HOME)
	npm install --prefix $(REDOCLY_HOME) --no-audit --no-fund --loglevel=error @redocly/cli@$(REDOCLY_VERSION)
	touch $@

openapi-lint: $(REDOCLY_STAMP) ## lint the served OpenAPI document with Redocly CLI's recommended rules, failing on errors and warnings
	@mkdir -p $(dir $(OPENAPI_OUT)) && rm -f $(OPENAPI_OUT)
	QASYNC_OPENAPI_OUT=$(OPENAPI_OUT) go test -count=1 -run '^TestOpenAPIRoute$$' ./shared/internal/httpapi/
	REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true $(REDOCLY) lint --extends=recommended-strict $(OPENAPI_OUT)

clean: ## remove build outputs and the tool cache
	rm -rf $(CACHE) $(DIST) $(EXAMPLE)/$(DIST)

# --- AWS deployment: the CDK app in infra/cdk (its own Go module; see the
# README's Deploy section). STAGE picks the stage settings (dev, prod, ...);
# CDK_ARGS passes more options to the CDK CLI, e.g. CDK_ARGS='-c tracing=true'.
# The CLI is pinned and installed into .cache/cdk on first use. synth needs
# neither the CLI nor AWS credentials; diff and deploy need credentials.
CDK_DIR     := infra/cdk
CDK_VERSION := 2.1148.1
CDK_HOME    := $(CACHE)/cdk
CDK         := $(CDK_HOME)/node_modules/.bin/cdk
CDK_STAMP   := $(CDK_HOME)/.installed-$(CDK_VERSION)
STAGE       ?= dev
CDK_ARGS    ?=

.PHONY: synth diff deploy cdk-test cdk-cli node

# The CDK's JavaScript side (the jsii runtime that the Go CDK app and its
# tests start, and the CDK CLI) runs on a pinned Node.js LTS installed
# into .cache/node from the npm registry (the npm package node installs
# its platform's binary package), not on the machine's node: Node 20 is
# past its end of life, and jsii printed a banner saying so on every
# synth. NODE_MIN_MAJOR is what scripts/nodecheck.sh requires (make node,
# and so every target below); raise both when 22 nears its end of life
# (2027-04-30). The stack's servers (scripts/stack.sh) keep the
# machine's node.
NODE_VERSION   := 22.23.3
NODE_MIN_MAJOR := 22
NODE_HOME      := $(CACHE)/node
NODE_BIN       := $(NODE_HOME)/node_modules/.bin
NODE           := $(NODE_BIN)/node
NODE_STAMP     := $(NODE_HOME)/.installed-$(NODE_VERSION)
# WITH_NODE runs a command with that node: first on PATH (the CDK CLI's
# #!/usr/bin/env node) and as JSII_NODE (the jsii runtime's).
WITH_NODE      := PATH="$(NODE_BIN):$$PATH" JSII_NODE="$(NODE)"

$(NODE_STAMP):
	rm -rf $(NODE_HOME) && mkdir -p $(NODE_HOME)
	@$(STEP) "installing Node.js $(NODE_VERSION) into .cache/node (npm package node)" "first run: $(T_NODE)" \
		npm install --prefix $(NODE_HOME) --no-audit --no-fund --loglevel=error node@$(NODE_VERSION)
	touch $@

node: $(NODE_STAMP) ## install the pinned Node.js LTS of the CDK tools into .cache/node and check its version
	@scripts/nodecheck.sh $(NODE) $(NODE_MIN_MAJOR)

$(CDK_STAMP):
	rm -rf $(CDK_HOME) && mkdir -p $(CDK_HOME)
	@$(STEP) "installing the AWS CDK CLI $(CDK_VERSION) into .cache/cdk" "first run: $(T_CDK_CLI)" \
		npm install --prefix $(CDK_HOME) --no-audit --no-fund --loglevel=error aws-cdk@$(CDK_VERSION)
	touch $@

cdk-cli: $(CDK_STAMP) ## install the pinned AWS CDK CLI into .cache/cdk

synth: build-lambda node ## synthesize the CloudFormation template into infra/cdk/cdk.out (STAGE=dev; no AWS credentials needed)
	@cd $(CDK_DIR) && $(WITH_NODE) CDK_OUTDIR=cdk.out CDK_CONTEXT_JSON='{"stage":"$(STAGE)"}' \
		$(CURDIR)/$(STEP) --go "synthesizing the $(STAGE) stack into infra/cdk/cdk.out" "first run: $(T_SYNTH); then about 1 min" go run -v .

diff: build-lambda node $(CDK_STAMP) ## show what `make deploy` would change in the AWS account (STAGE=dev)
	cd $(CDK_DIR) && $(WITH_NODE) $(CDK) diff -c stage=$(STAGE) $(CDK_ARGS)

deploy: build-lambda node $(CDK_STAMP) ## deploy the stack to the AWS account of your credentials (STAGE=dev) and print its outputs
	cd $(CDK_DIR) && $(WITH_NODE) $(CDK) deploy -c stage=$(STAGE) --require-approval broadening \
		--outputs-file cdk.out/outputs-$(STAGE).json $(CDK_ARGS)

cdk-test: node ## test the CDK app: the Node.js it runs on, vet, gofmt, template assertions and cdk-nag (placeholder zips, no AWS)
	@cd $(CDK_DIR) && $(CURDIR)/$(STEP) "compiling and vetting the CDK app" "first run: $(T_SYNTH)" go vet ./...
	cd $(CDK_DIR) && out=$$(gofmt -l .) && \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	cd $(CDK_DIR) && $(WITH_NODE) go test -count=1 -timeout 10m -v ./... 2>&1 | \
		grep -vE '^(!!|=== (RUN|PAUSE|CONT))' || exit 1

# --- The example service (examples/: a module of its own, importing only
# qasync's public packages; its CDK app is a module of its own too, in
# examples/invoices/infra). Its bundles go to examples/invoices/dist.
EXAMPLE     := examples/invoices
EXAMPLE_CDK := $(EXAMPLE)/infra

# The payments example's end-to-end test (examples/payments/local_test.go)
# pays a generated CSV file of PAYMENTS_N rows through its local main:
# examples-test on the embedded store and on DynamoDB Local + the SQS
# server, examples-scale (not in CI) with SCALE_N rows on both, printing
# payments/s and the counts.
PAYMENTS_N  ?= 1000
SCALE_N     ?= 10000
PAYMENTS_TEST = go test -count=1 -run TestLocalMainPaysAFileOfPayments ./payments/

.PHONY: examples-bundles examples-test examples-scale

examples-bundles: ## build the example service's five Lambda functions into examples/invoices/dist (linux/arm64)
	$(call lambda-bundles,$(EXAMPLE),functions,$(DIST))

# The module downloads come from the same cache (GOMODCACHE above).
examples-test: examples-bundles node ## the example services: vet, gofmt, their pipelines end to end through their local mains (payments: PAYMENTS_N rows on both backends), the invoices CDK app synthesized with assertions
	cd examples && go vet ./... && out=$$(gofmt -l .) && \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	cd examples && QASYNC_PAYMENTS_N=$(PAYMENTS_N) go test -count=1 -timeout 10m ./...   # payments on the embedded store
	$(STACK) run sh -c 'cd examples && QASYNC_PAYMENTS_STATE=dynamo QASYNC_PAYMENTS_N=$(PAYMENTS_N) $(PAYMENTS_TEST) -timeout 10m'   # and on DynamoDB + SQS
	cd $(EXAMPLE_CDK) && go vet ./... && $(WITH_NODE) QASYNC_REQUIRE_BUNDLES=1 go test -count=1 -timeout 5m ./...

examples-scale: ## the payments example with SCALE_N (10000) rows on the embedded store and on DynamoDB + SQS: payments/s and counts (not in CI)
	bash -o pipefail -c "cd examples && QASYNC_PAYMENTS_N=$(SCALE_N) $(PAYMENTS_TEST) -timeout 60m -v 2>&1 | grep -E 'payments:|^(--- |ok|FAIL|panic)'"
	$(STACK) run bash -o pipefail -c "cd examples && QASYNC_PAYMENTS_STATE=dynamo QASYNC_PAYMENTS_N=$(SCALE_N) $(PAYMENTS_TEST) -timeout 60m -v 2>&1 | grep -E 'payments:|^(--- |ok|FAIL|panic)'"
