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
# PostgreSQL sessions, then every key checked; on Redis, killed, hung and
# switched-over primaries, every client's count checked (e.g. just chaos -duration 5m;
# -seed N replays a schedule the log printed).
chaos *args:
    ./acceptance.sh -run Chaos -timeout 2h -- {{args}}

# Fail on a relative link in README.md or docs/*.md that does not resolve.
linkcheck:
    go run ./internal/tools/linkcheck

# The docs site in site/: README.md, docs/*.md, the Example functions of
# porch/ and the charts in docs/*.svg, link-checked. Open site/index.html.
site:
    go run ./internal/tools/site
    go run ./internal/tools/linkcheck -site site

# Redraw docs/perf-reqs.svg and docs/perf-latency.svg from the throughput
# table in FROM: docs/performance.md, or a saved `just bench` output.
charts from="docs/performance.md":
    go run ./internal/tools/perfchart -in {{from}} -out docs

# `just bench`, its output kept in bench-out.txt, then the charts drawn from it.
bench-charts *args:
    #!/usr/bin/env bash
    set -euo pipefail
    just bench {{args}} | tee bench-out.txt
    go run ./internal/tools/perfchart -in bench-out.txt -out docs

# Installs Debian's wrk if it is missing; docs/performance.md explains the
# output. The go test benchmarks are separate:
# go test -run '^$' -bench . -benchmem ./porch/...
# The load harness: every limiter under wrk on loopback, memory, the targets (args are its flags, e.g. -duration 10s).
bench *args:
    command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk)
    cd bench && go run ./cmd/bench {{args}}

# Run every fuzz target (func Fuzz… in porch/ and sample/) for a while each,
# e.g. `just fuzz 60s`. `go test ./...` already runs their seed corpora as
# plain tests; an input that fails here is saved under the package's
# testdata/fuzz/, to check in with its fix.
fuzz time="30s":
    #!/usr/bin/env bash
    set -euo pipefail
    grep -rHo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*' porch sample | sort | while IFS=: read -r file fn; do
        name=${fn#func }
        printf '\n>>> %s in ./%s for %s\n' "$name" "$(dirname "$file")" '{{time}}'
        go test -run '^$' -fuzz "^${name}\$" -fuzztime '{{time}}' "./$(dirname "$file")"
    done

# A PostgreSQL-only program, built without a C compiler, served and stopped
# against PORCH_TEST_POSTGRES (or -dsn DSN): the drivers are leaves.
pgonly *args:
    CGO_ENABLED=0 go build -o /tmp/porch-pgonly ./internal/tools/pgonly && /tmp/porch-pgonly {{args}}

# Rewrite api.txt, the record of porch's public API that CI holds the code
# to, after a deliberate change to it (say what changed in CHANGELOG.md).
api:
    go run ./internal/tools/apilist > api.txt
