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

# The Lambda functions (functions/<fn>), built for the provided.al2023
# runtime on arm64 into dist/<fn>/bootstrap and dist/<fn>.zip.
LAMBDA_FNS := submit worker sweeper dlq
DIST       := dist

# The AWS Lambda Runtime Interface Emulator runs the real function binaries
# on this machine (make local-cloud, and the tests of shared/localcloud).
RIE_VERSION := v0.0.0-20261030222936-bef5c4ba774d
RIE         := $(BIN)/aws-lambda-rie
LOCAL       := $(CACHE)/local

.PHONY: help run build build-local build-lambda test test-unit fuzz bench vet fmt-check clean stack-up stack-down provision rie local-cloud

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

build: build-local build-lambda ## build the local binary (.cache/bin/qasync) and the Lambda bundles (dist/<fn>.zip)

build-local: ## build the local binary into .cache/bin/qasync
	go build -o $(BIN)/qasync ./cmd/qasync

build-lambda: ## build each Lambda function into dist/<fn>/bootstrap and dist/<fn>.zip (linux/arm64) and print the sizes
	go build -o $(BIN)/zipbootstrap ./scripts/zipbootstrap
	@for fn in $(LAMBDA_FNS); do \
		mkdir -p $(DIST)/$$fn; \
		GOOS=linux GOARCH=arm64 CGO_ENABLED=0 go build -tags lambda.norpc -trimpath -ldflags='-s -w -buildid=' \
			-o $(DIST)/$$fn/bootstrap ./functions/$$fn; \
		$(BIN)/zipbootstrap $(DIST)/$$fn/bootstrap $(DIST)/$$fn.zip; \
	done

run: build-local ## serve the API, workers and sweeper on $(ADDR) with in-memory providers
	PIPELINE_ORCHESTRATOR_SWEEP_INTERVAL=$${PIPELINE_ORCHESTRATOR_SWEEP_INTERVAL:-1s} \
	exec $(BIN)/qasync serve --addr $(ADDR)

test: build-lambda vet fmt-check test-unit fuzz ## everything CI runs: vet, gofmt, all tests with -race against the local AWS stack, a short fuzz

# The stack is started for the tests and stopped afterwards, also on failure.
test-unit: build-local rie
	QASYNC_REQUIRE_STACK=1 QASYNC_BIN=$(BIN)/qasync $(STACK) run go test -race -count=1 -timeout 12m ./...

stack-up: ## install (into .cache/) and start DynamoDB Local and the SQS server on loopback
	$(STACK) up
	@$(STACK) env

stack-down: ## stop the local AWS stack
	$(STACK) down

provision: build-local ## create the tables and queues on the local stack (make stack-up first)
	eval "$$($(STACK) env)" && $(BIN)/qasync provision

rie: $(RIE) ## install the AWS Lambda Runtime Interface Emulator (pinned) into .cache/bin

$(RIE):
	GOBIN=$(BIN) go install github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@$(RIE_VERSION)

# The serverless topology on this machine: the four functions (host builds
# in .cache/local/<fn>/bootstrap) under RIE, with the API Gateway front, the
# SQS event source mappings and the sweeper's schedule emulated by
# `qasync local`, on the local stack (tables and queues named local-*). The
# stack is stopped on exit if this target started it. As with `make run`,
# submits need no Idempotency-Key.
local-cloud: build-local rie ## run the four Lambda functions under RIE on $(ADDR), durable on the local stack
	@for fn in $(LAMBDA_FNS); do go build -tags lambda.norpc -o $(LOCAL)/$$fn/bootstrap ./functions/$$fn; done
	$(STACK) run bash -c 'set -euo pipefail; \
	  eval "$$($(BIN)/qasync provision local)"; \
	  export PIPELINE_ORCHESTRATOR_DYNAMO_DEAD_LETTER_TABLE="$${PIPELINE_ORCHESTRATOR_DYNAMO_DEAD_LETTER_TABLE:-local-dead-letters}"; \
	  export PIPELINE_ORCHESTRATOR_IDEMPOTENCY_POLICY="$${PIPELINE_ORCHESTRATOR_IDEMPOTENCY_POLICY:-OPTIONAL_CLIENT_KEY}"; \
	  exec $(BIN)/qasync local --local-addr $(ADDR) --local-bin-dir $(LOCAL) --local-rie $(RIE)'

fuzz: ## fuzz the submit handler ($(FUZZTIME) inputs, a few seconds)
	go test -run '^$$' -fuzz '^FuzzSubmit$$' -fuzztime $(FUZZTIME) ./shared/httpapi/

bench: ## report transitions per second of the memory providers on this machine
	go test -run '^$$' -bench Transitions -benchtime 20x ./shared/runtime/

vet:
	go vet ./...

fmt-check:
	@out=$$(gofmt -l cmd shared pipelines functions scripts); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

clean: ## remove build outputs and the tool cache
	rm -rf $(CACHE) $(DIST)
