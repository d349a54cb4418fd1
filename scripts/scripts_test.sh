#!/usr/bin/env bash
# Tests of make's helper scripts (make stack-test runs it), a few seconds,
# in a temporary directory:
#   devtoken.sh  generates a 64-hex-character token (file 0600, directory
#                0700), reuses it, tightens a loose mode, replaces a
#                too-short one, refuses a symbolic link, never prints it;
#   nodecheck.sh accepts Node.js of the needed major or newer, and fails
#                naming the needed version on an older, missing or broken
#                binary;
#   step.sh      prints what runs first, a progress line while it runs
#                (go build -v's packages counted, other lines passed),
#                and keeps the command's exit status;
#   make run     passes the token in serve's environment, not its
#                command line (make -n).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd -P)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0

check() { # check NAME CONDITION...: one case
  local name=$1
  shift
  if "$@"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "scripts_test: FAIL $name" >&2
    [ -f "$tmp/out" ] && sed 's/^/  | /' "$tmp/out" >&2
  fi
}
mode() { stat -c %a "$1"; }

# devtoken.sh
tok="$tmp/data/admin-token"
"$root/scripts/devtoken.sh" "$tok" >"$tmp/out" 2>&1
first=$(cat "$tok")
check "devtoken: 64 hex characters" bash -c '[[ $1 =~ ^[0-9a-f]{64}$ ]]' _ "$first"
check "devtoken: file 0600" [ "$(mode "$tok")" = 600 ]
check "devtoken: directory 0700" [ "$(mode "$tmp/data")" = 700 ]
check "devtoken: says where, not what" bash -c 'grep -q "generated a development operator token in '"$tok"'" "$1" && ! grep -q "$2" "$1"' _ "$tmp/out" "$first"
"$root/scripts/devtoken.sh" "$tok" >"$tmp/out" 2>&1
check "devtoken: reused, silently" bash -c '[ "$(cat "$1")" = "$2" ] && [ ! -s "$3" ]' _ "$tok" "$first" "$tmp/out"
chmod 0644 "$tok"
"$root/scripts/devtoken.sh" "$tok" >"$tmp/out" 2>&1
check "devtoken: a loose mode is tightened" bash -c '[ "$(stat -c %a "$1")" = 600 ] && [ "$(cat "$1")" = "$2" ]' _ "$tok" "$first"
echo a >"$tok"
"$root/scripts/devtoken.sh" "$tok" >"$tmp/out" 2>&1
check "devtoken: a too-short token is replaced" bash -c '[[ $(cat "$1") =~ ^[0-9a-f]{64}$ ]]' _ "$tok"
ln -s "$tmp/elsewhere" "$tmp/link"
check "devtoken: a symbolic link is refused" bash -c '! "$1" "$2" >"$3" 2>&1 && grep -q "not a regular file" "$3" && [ ! -e "$4" ]' _ \
  "$root/scripts/devtoken.sh" "$tmp/link" "$tmp/out" "$tmp/elsewhere"

# nodecheck.sh, with stand-in node binaries
fake() { printf '#!/bin/sh\necho %s\n' "$2" >"$tmp/$1" && chmod +x "$tmp/$1"; }
fake node20 v20.20.2
fake node22 v22.23.3
fake node24 v24.1.0
fake nodebad "not a version"
printf '#!/bin/sh\nexit 1\n' >"$tmp/nodebroken" && chmod +x "$tmp/nodebroken"
for v in 22 24; do
  check "nodecheck: v$v passes" bash -c '"$1" "$2" 22 >"$3" 2>&1 && grep -q "is Node.js v" "$3"' _ "$root/scripts/nodecheck.sh" "$tmp/node$v" "$tmp/out"
done
for c in "node20:too old" "missing:is missing" "nodebad:not vMAJOR" "nodebroken:does not run"; do
  check "nodecheck: ${c%%:*} fails" bash -c '! "$1" "$2" 22 >"$3" 2>&1 && grep -q "$4" "$3" && grep -q "the CDK needs Node.js 22 or newer; make node installs" "$3"' _ \
    "$root/scripts/nodecheck.sh" "$tmp/${c%%:*}" "$tmp/out" "${c#*:}"
done

# step.sh
rc=0
QASYNC_STEP_EVERY=1 "$root/scripts/step.sh" --go "building x" "a moment" bash -c \
  'echo example.com/a; echo example.com/b/c; echo "# example.com/d"; echo "d.go:1:1: an error"; sleep 2.5; exit 3' >"$tmp/out" 2>&1 || rc=$?
check "step: exit status kept" [ "$rc" = 3 ]
check "step: what runs, first" bash -c '[ "$(head -1 "$1")" = "==> building x (a moment)" ]' _ "$tmp/out"
check "step: progress with the packages counted" grep -q "still building x: [0-9]*s, 2 packages compiled so far" "$tmp/out"
check "step: other lines pass, package lines do not" bash -c 'grep -q "^d.go:1:1: an error$" "$1" && grep -q "^# example.com/d$" "$1" && ! grep -q "^example.com/a$" "$1"' _ "$tmp/out"
QASYNC_STEP_EVERY=30 "$root/scripts/step.sh" "quick" "instant" true >"$tmp/out" 2>&1
check "step: a quick step prints its one line" bash -c '[ "$(cat "$1")" = "==> quick (instant)" ]' _ "$tmp/out"

# make run: the token reaches serve in its environment, from the file,
# and never on its command line.
make -s -n -C "$root" run >"$tmp/out" 2>&1
check "make run: the token in the environment, from its file" \
  grep -q 'PIPELINE_ORCHESTRATOR_ADMIN_TOKEN="${PIPELINE_ORCHESTRATOR_ADMIN_TOKEN:-$(cat .qasync/admin-token)}"' "$tmp/out"
check "make run: serve's command line has no token" bash -c 'grep -q "exec .*/qasync serve --addr" "$1" && ! grep "qasync serve" "$1" | grep -qi token' _ "$tmp/out"

rm -f "$tmp/out"
echo "scripts_test: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
