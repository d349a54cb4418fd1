#!/usr/bin/env bash
# One long step of a make target, never silent for long: first a line
# saying what runs and roughly how long it takes, then, while it runs, a
# line every QASYNC_STEP_EVERY seconds (default 20) with the time so far.
# With --go the command is a go build or go install run with -v: the
# package names it prints as it compiles them are counted into that line
# instead of printed (hundreds on a first build), and every other line
# (errors, "go: downloading ...") passes through. The exit status is the
# command's.
#
#   scripts/step.sh [--go] "WHAT" "HOW LONG" CMD [ARGS...]
#
# e.g. scripts/step.sh --go "building .cache/bin/qasync" "first build: about 4 min" go build -v -o .cache/bin/qasync ./cmd/qasync
set -euo pipefail

go_mode=
if [ "${1:-}" = --go ]; then
  go_mode=1
  shift
fi
if [ $# -lt 3 ]; then
  echo "usage: scripts/step.sh [--go] WHAT HOW-LONG CMD [ARGS...]" >&2
  exit 2
fi
what=$1 eta=$2
shift 2
every=${QASYNC_STEP_EVERY:-20}

printf '==> %s (%s)\n' "$what" "$eta"

# progress reads the command's output (stdout and stderr), passes it on
# and says every $every seconds that the step still runs.
progress() {
  local start=$SECONDS last=$SECONDS n=0 line rc pending=
  while :; do
    line= rc=0
    IFS= read -r -t 1 line || rc=$?
    if [ "$rc" -gt 128 ]; then
      pending+=$line # a timeout keeps a line's start: wait for its end
      line=
    else
      line=$pending$line
      pending=
    fi
    if [ -n "$line" ]; then
      if [ -n "$go_mode" ] && [[ $line =~ ^[A-Za-z0-9._~/+-]+$ ]]; then
        n=$((n + 1))
      else
        printf '%s\n' "$line"
      fi
    fi
    if [ "$rc" -ne 0 ] && [ "$rc" -le 128 ]; then
      break # end of the output: the command is done
    fi
    if ((SECONDS - last >= every)); then
      last=$SECONDS
      if [ -n "$go_mode" ]; then
        printf '    ... still %s: %ds, %d packages compiled so far\n' "$what" $((SECONDS - start)) "$n"
      else
        printf '    ... still %s: %ds\n' "$what" $((SECONDS - start))
      fi
    fi
  done
  if ((SECONDS - start >= every)); then
    printf '    %s: ended after %ds\n' "$what" $((SECONDS - start))
  fi
}

"$@" 2>&1 | progress
