#!/usr/bin/env bash
# make run's development operator token: FILE (.qasync/admin-token) holds
# a random token of 64 hex characters (256 bits, above the 32-character
# minimum of config.MinAdminTokenLength), made on the first run and reused
# after. The file is mode 0600 and its directory (the git-ignored data
# directory) 0700 when this script creates it; an existing file is set to
# 0600. The token is never printed: make run passes it to qasync serve
# in the environment (PIPELINE_ORCHESTRATOR_ADMIN_TOKEN), and serve's
# startup names this file for signing in.
#
#   scripts/devtoken.sh FILE
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: scripts/devtoken.sh FILE" >&2
  exit 2
fi
file=$1
dir=$(dirname "$file")

umask 077
[ -d "$dir" ] || mkdir -p -m 0700 "$dir"
if [ -L "$file" ] || { [ -e "$file" ] && [ ! -f "$file" ]; }; then
  echo "devtoken: $file is not a regular file: remove it" >&2
  exit 1
fi
if [ -s "$file" ] && [ "$(tr -d '[:space:]' <"$file" | wc -c)" -ge 32 ]; then
  chmod 0600 "$file"
  exit 0
fi
tmp=$(mktemp "$dir/.admin-token.XXXXXX")
trap 'rm -f "$tmp"' EXIT
od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$tmp"
echo >>"$tmp"
chmod 0600 "$tmp"
mv -f "$tmp" "$file"
trap - EXIT
echo "devtoken: generated a development operator token in $file (mode 0600; reused by later runs, remove it for a new one)" >&2
