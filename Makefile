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

.PHONY: help run build test test-unit fuzz bench vet fmt-check clean stack-up stack-down provision

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

build: ## build the local binary into .cache/bin/qasync
	go build -o $(BIN)/qasync ./cmd/qasync

run: build ## serve the API, workers and sweeper on $(ADDR) with in-memory providers
	PIPELINE_ORCHESTRATOR_SWEEP_INTERVAL=$${PIPELINE_ORCHESTRATOR_SWEEP_INTERVAL:-1s} \
	exec $(BIN)/qasync serve --addr $(ADDR)

test: vet fmt-check test-unit fuzz ## everything CI runs: vet, gofmt, all tests with -race against the local AWS stack, a short fuzz

# The stack is started for the tests and stopped afterwards, also on failure.
test-unit: build
	QASYNC_REQUIRE_STACK=1 QASYNC_BIN=$(BIN)/qasync $(STACK) run go test -race -count=1 -timeout 12m ./...

stack-up: ## install (into .cache/) and start DynamoDB Local and the SQS server on loopback
	$(STACK) up
	@$(STACK) env

stack-down: ## stop the local AWS stack
	$(STACK) down

provision: build ## create the tables and queues on the local stack (make stack-up first)
	eval "$$($(STACK) env)" && $(BIN)/qasync provision

fuzz: ## fuzz the submit handler ($(FUZZTIME) inputs, a few seconds)
	go test -run '^$$' -fuzz '^FuzzSubmit$$' -fuzztime $(FUZZTIME) ./shared/httpapi/

bench: ## report transitions per second of the memory providers on this machine
	go test -run '^$$' -bench Transitions -benchtime 20x ./shared/runtime/

vet:
	go vet ./...

fmt-check:
	@out=$$(gofmt -l cmd shared pipelines); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

clean: ## remove build outputs and the tool cache
	rm -rf $(CACHE)
