#!/usr/bin/env bash
# The acceptance gate: builds the storefront, starts real storefront processes
# on 127.0.0.1 and checks the rate limiter's contract over real HTTP and in
# the SQLite tables. Extra arguments go to go test (e.g. -run Kill9).
set -euo pipefail
cd "$(dirname "$0")"
exec go test -tags acceptance -count=1 -v "$@" ./acceptance/
