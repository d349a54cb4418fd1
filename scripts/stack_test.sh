#!/usr/bin/env bash
# Tests of scripts/stack.sh (make stack-test), a few seconds:
#   1. run and up with a DynamoDB Local that cannot start (a java on PATH
#      that exits at once) fail and leave no SQS server, no listener and
#      no pid file behind;
#   2. run with the SQS port held by another program fails and stops the
#      DynamoDB Local it had started;
#   3. pid files that name a live process of another program, or another
#      port, are not trusted, and a run on other ports then works.
# Each case uses its own free ports below 32768 (STACK_TEST_PORT_MIN,
# default 20000, to 32767). Everything the test starts is stopped on every
# exit path.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd -P)"
stack="$root/scripts/stack.sh"
state="$root/.cache/stack"
tmp=$(mktemp -d)
holders=() # pids of the port holders this test starts
pairs=()   # "dynamo sqs" port pairs handed to stack.sh

cleanup() {
  local rc=$? p pair
  for p in "${holders[@]}"; do kill "$p" 2>/dev/null || true; done
  for pair in "${pairs[@]}"; do
    QASYNC_DYNAMO_PORT=${pair% *} QASYNC_SQS_PORT=${pair#* } "$stack" down >/dev/null 2>&1 || true
    rm -f "$state/dynamodb-${pair% *}.log" "$state/sqs-${pair#* }.log"
  done
  rm -rf "$tmp"
  if [ "$rc" -eq 0 ]; then echo "stack_test: PASS"; else echo "stack_test: FAIL" >&2; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() { echo "stack_test: $*" >&2; [ -f "$tmp/log" ] && sed 's/^/  | /' "$tmp/log" >&2; exit 1; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

chosen=" "
# free_pair: set d and s to two closed ports below 32768 that no earlier
# case used.
free_pair() {
  local min=${STACK_TEST_PORT_MIN:-20000} out=() p
  while [ ${#out[@]} -lt 2 ]; do
    p=$((min + RANDOM % (32768 - min)))
    [[ $chosen == *" $p "* ]] && continue
    port_open "$p" && continue
    chosen+="$p "
    out+=("$p")
  done
  d=${out[0]} s=${out[1]}
}

# hold PORT: a python3 listener on 127.0.0.1:PORT; prints its pid.
hold() {
  rm -f "$tmp/ready"
  python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen()
open(sys.argv[2], "w").close(); time.sleep(120)' "$1" "$tmp/ready" &
  holders+=($!)
  for _ in $(seq 50); do [ -f "$tmp/ready" ] && return 0; sleep 0.1; done
  fail "the listener on port $1 did not start"
}

# assert_clean DYNAMO SQS [HELD]: no pid file, no server process and no
# listener is left for either port (except HELD, the test's own listener).
assert_clean() {
  local d=$1 s=$2 held=${3:-}
  for f in "$state/dynamodb-$d.pid" "$state/sqs-$s.pid"; do
    [ ! -e "$f" ] || fail "$f is left behind: $(cat "$f")"
  done
  if pgrep -f -- "DynamoDBLocal.jar .*-port $d( |\$)" >/dev/null; then fail "a DynamoDB Local on port $d is left running"; fi
  if pgrep -f -- "fauxqs-loopback.mjs $s( |\$)" >/dev/null; then fail "an SQS server on port $s is left running"; fi
  for p in "$d" "$s"; do
    [ "$p" = "$held" ] && continue
    if port_open "$p"; then fail "port $p still accepts connections"; fi
  done
}

# on_ports DYNAMO SQS ARGS...: stack.sh on those ports, stderr into $tmp/log.
on_ports() {
  local d=$1 s=$2
  shift 2
  pairs+=("$d $s")
  QASYNC_DYNAMO_PORT=$d QASYNC_SQS_PORT=$s "$stack" "$@" 2>"$tmp/log"
}

"$stack" install

# 1. A DynamoDB Local that cannot start: the SQS server started next to it
#    is stopped, by run and by up alike.
mkdir -p "$tmp/bin"
printf '#!/bin/sh\necho "bogus java: cannot start" >&2\nexit 1\n' >"$tmp/bin/java"
chmod +x "$tmp/bin/java"
for mode in run up; do
  free_pair
  args=(up)
  [ "$mode" = run ] && args=(run true)
  if PATH="$tmp/bin:$PATH" on_ports "$d" "$s" "${args[@]}"; then fail "$mode succeeded with a java that cannot start"; fi
  grep -q "dynamodb exited" "$tmp/log" || fail "$mode: want 'dynamodb exited' in its log"
  [ -f "$state/sqs-$s.log" ] || fail "$mode: the SQS server was never started, so the case proves nothing"
  assert_clean "$d" "$s"
  echo "stack_test: ok: $mode with a failing DynamoDB Local leaves nothing behind (ports $d, $s)"
done

# 2. The SQS port is held by another program: run fails, naming the port,
#    and stops the DynamoDB Local it had started.
free_pair
hold "$s"
if on_ports "$d" "$s" run true; then fail "run succeeded with port $s held by another program"; fi
grep -q "port $s (sqs) is in use" "$tmp/log" || fail "want 'port $s (sqs) is in use' in the log"
[ -f "$state/dynamodb-$d.log" ] || fail "DynamoDB Local was never started, so the case proves nothing"
assert_clean "$d" "$s" "$s"
echo "stack_test: ok: a held SQS port fails the run and stops DynamoDB Local (ports $d, $s)"

# 3. Pid files naming a live process of another program (the listener of
#    case 2) on the right port, or a server of another port, are ignored;
#    the run starts its own servers, works, stops them and leaves the
#    other program alive.
foreign=${holders[0]}
free_pair
mkdir -p "$state"
echo "$foreign $d" >"$state/dynamodb-$d.pid"
echo "$foreign $((s + 1))" >"$state/sqs-$s.pid"
on_ports "$d" "$s" run bash -c 'curl -sf -o /dev/null -X POST "$AWS_ENDPOINT_URL_SQS/health" &&
  [ "$(curl -s -o /dev/null -w "%{http_code}" -X POST "$AWS_ENDPOINT_URL_DYNAMODB/")" = 400 ]' ||
  fail "run on fresh ports $d, $s failed"
[ "$(grep -c "^stack: ignoring" "$tmp/log")" = 2 ] || fail "want both untrusted pid files ignored"
kill -0 "$foreign" 2>/dev/null || fail "stack.sh killed the foreign process a pid file named"
assert_clean "$d" "$s"
echo "stack_test: ok: untrusted pid files are ignored and a run on other ports works (ports $d, $s)"
