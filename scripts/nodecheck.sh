#!/usr/bin/env bash
# Checks that NODE (a node binary) is Node.js MAJOR or newer, the version
# the CDK's tools (the jsii runtime of `make synth` and `make cdk-test`,
# the CDK CLI) are run with: an older one prints an end-of-life banner on
# every synth and is no longer supported. Prints the version it found;
# fails naming the needed version and how to get it when NODE is missing,
# does not run, or is older.
#
#   scripts/nodecheck.sh NODE MAJOR
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: scripts/nodecheck.sh NODE MAJOR" >&2
  exit 2
fi
node=$1 need=$2
fix="make node installs the pinned Node.js $need.x into .cache/node (rm -rf .cache/node to reinstall)"

if [ ! -x "$node" ]; then
  echo "nodecheck: $node is missing: the CDK needs Node.js $need or newer; $fix" >&2
  exit 1
fi
if ! version=$("$node" --version 2>/dev/null); then
  echo "nodecheck: $node does not run: the CDK needs Node.js $need or newer; $fix" >&2
  exit 1
fi
if ! [[ $version =~ ^v([0-9]+)\.[0-9]+\.[0-9]+$ ]]; then
  echo "nodecheck: $node --version printed \"$version\", not vMAJOR.MINOR.PATCH: the CDK needs Node.js $need or newer; $fix" >&2
  exit 1
fi
if ((BASH_REMATCH[1] < need)); then
  echo "nodecheck: $node is Node.js $version, too old: the CDK needs Node.js $need or newer; $fix" >&2
  exit 1
fi
echo "nodecheck: $node is Node.js $version (needed: $need or newer)"
