# porch-go's everyday commands; `just --list` shows them. CI (.ci/run) runs
# the same commands without just.

# Run the sample storefront (extra arguments are its flags, e.g. -addr :9000).
run *args:
    go run ./sample/storefront {{args}}

# Every unit test, with the race detector.
test:
    go test -race ./...

# The acceptance gate: real storefront processes on loopback, real HTTP, the SQLite tables.
web-app *args:
    ./acceptance.sh {{args}}

# Keyed checkouts per second, the working tree against REV (default: before
# the exactly-once change), alternated on SQLite and PostgreSQL.
bench-checkout rev="cc0b196" rounds="3" duration="5s":
    bench/checkout.sh {{rev}} {{rounds}} {{duration}}

# The chaos legs alone, for longer: kill -9, hang-ups, duplicates and lost
# PostgreSQL sessions, then every key checked (e.g. just chaos -duration 5m;
# -seed N replays a schedule the log printed).
chaos *args:
    ./acceptance.sh -run Chaos -timeout 2h -- {{args}}

# Fail on a relative link in README.md or docs/*.md that does not resolve.
linkcheck:
    go run ./internal/tools/linkcheck

# Installs Debian's wrk if it is missing; docs/performance.md explains the
# output. The go test benchmarks are separate:
# go test -run '^$' -bench . -benchmem ./porch/...
# The load harness: every limiter under wrk on loopback, memory, the targets (args are its flags, e.g. -duration 10s).
bench *args:
    command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk)
    cd bench && go run ./cmd/bench {{args}}
