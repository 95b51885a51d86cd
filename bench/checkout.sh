#!/usr/bin/env bash
# Keyed checkouts per second: the storefront built from the working tree
# against one built from REV (default: main), alternated ROUNDS times on SQLite and on PostgreSQL
# ($PORCH_TEST_POSTGRES, else the local server), each run wrk -t2 -c32 for
# DURATION with a fresh Idempotency-Key per request and the rate limiter off.
# Prints every round and the medians; a run that got non-2xx answers says
# how many (it then measured failures too).
#   bench/checkout.sh [REV] [ROUNDS] [DURATION]
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:-main}
rounds=${2:-3}
duration=${3:-5s}
dsn=${PORCH_TEST_POSTGRES:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; git worktree remove --force "$tmp/rev" 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/head" ./sample/storefront
git worktree add -q --detach "$tmp/rev" "$rev"
(cd "$tmp/rev" && go build -o "$tmp/base" ./sample/storefront)

# run BIN BACKEND prints requests/s of one wrk run against a fresh database.
run() {
	local bin=$1 backend=$2 args=(-addr 127.0.0.1:0 -no-rate-limit) schema
	if [[ $backend == sqlite ]]; then
		args+=(-db "$tmp/db-$RANDOM.db")
	else
		schema=bench_$RANDOM$RANDOM
		psql -q "$dsn" -c "CREATE SCHEMA $schema" >/dev/null
		args+=(-postgres "$dsn&search_path=$schema")
	fi
	"$bin" "${args[@]}" >"$tmp/out" 2>"$tmp/err" &
	local pid=$! addr=""
	for _ in $(seq 100); do
		addr=$(sed -n 's/^storefront: listening on //p' "$tmp/out")
		[[ -n $addr ]] && curl -fs "http://$addr/healthz" >/dev/null && break
		sleep 0.1
	done
	wrk -t2 -c32 -d"$duration" -s bench/cmd/bench/lua/checkout.lua "http://$addr" -- "r$RANDOM" |
		awk '/Non-2xx/ {bad = $NF} /Requests\/sec/ {rps = $2} END {if (bad > 0) print rps "(" bad "-non-2xx)"; else print rps}'
	kill -TERM $pid
	wait $pid || true
	[[ $backend == sqlite ]] || psql -q "$dsn" -c "SET client_min_messages = warning" -c "DROP SCHEMA $schema CASCADE" >/dev/null
}

for backend in sqlite postgres; do
	base=() head=()
	for r in $(seq "$rounds"); do
		base+=("$(run "$tmp/base" $backend)")
		head+=("$(run "$tmp/head" $backend)")
		echo "$backend round $r: $rev ${base[-1]} req/s, working tree ${head[-1]} req/s"
	done
	median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
	mb=$(median "${base[@]}") mh=$(median "${head[@]}")
	echo "$backend median: $rev $mb req/s, working tree $mh req/s, ratio $(awk -v a="$mh" -v b="$mb" 'BEGIN {printf "%.2f", a/b}')"
done
