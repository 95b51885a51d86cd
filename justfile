# porch-go's everyday commands; `just --list` shows them, each by the one
# comment line right above it. CI (.ci/run) runs the same commands without
# just. Install just with `npm i -g rust-just`, `cargo install just` or,
# on Debian 13 (trixie) or later, `apt-get install just`.

# Run the sample storefront (extra arguments are its flags, e.g. -addr :9000).
run *args:
    go run ./sample/storefront {{args}}

# Every unit test, with the race detector (3–8 min on 2 shared cores).
test:
    go test -race ./...

# The acceptance gate: real storefronts on loopback (about 4.5 min on 2 cores).
web-app *args:
    ./acceptance.sh {{args}}

# Keyed checkouts per second, the working tree against REV, on SQLite and PostgreSQL.
bench-checkout rev="main" rounds="3" duration="5s":
    bench/checkout.sh {{rev}} {{rounds}} {{duration}}

# Kill -9, hang-ups, duplicates and lost PostgreSQL sessions, then every key
# checked; on Redis, killed, hung and switched-over primaries, every client's
# count checked. -seed N replays a schedule the log printed.

# The chaos legs alone, for longer (e.g. just chaos -duration 5m).
chaos *args:
    ./acceptance.sh -run Chaos -timeout 2h -- {{args}}

# Fail on a relative link in README.md or docs/*.md that does not resolve.
linkcheck:
    go run ./internal/tools/linkcheck

# The docs site in site/ (README, docs, runnable examples), link-checked; open site/index.html.
site:
    go run ./internal/tools/site
    go run ./internal/tools/linkcheck -site site

# FROM is docs/performance.md or a saved `just bench` output.

# Redraw (overwrite) docs/perf-reqs.svg and docs/perf-latency.svg from FROM's throughput table.
charts from="docs/performance.md":
    go run ./internal/tools/perfchart -in {{from}} -out docs

# `just bench`, its output kept in bench-out.txt, then its charts written over docs/perf-*.svg.
[positional-arguments]
bench-charts *args:
    #!/usr/bin/env bash
    set -euo pipefail
    just bench "$@" | tee bench-out.txt
    go run ./internal/tools/perfchart -in bench-out.txt -out docs

# Installs Debian's wrk if it is missing; docs/performance.md explains the
# output. The go test benchmarks are separate:
# go test -run '^$' -bench . -benchmem ./porch/...

# Every limiter under wrk on loopback, installing wrk if missing (args are its flags, e.g. -duration 10s).
[positional-arguments]
bench *args:
    command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk)
    cd bench && go run ./cmd/bench "$@"

# porch on PostgreSQL beside the handler a chi user writes by hand (one upsert a request), at 1, 2, 16 and 64 connections.
[positional-arguments]
bench-handwritten *args:
    just bench -c 1,2,16,64 -mem-keys '' -rows 'httprate/*,porch-postgres/*,porch-postgres-crash/*,naive-postgres*/*' "$@"

# `go test ./...` already runs the seed corpora as plain tests; an input
# that fails here is saved under the package's testdata/fuzz/, to check in
# with its fix.

# Run every fuzz target in porch/ and sample/ for TIME each (e.g. just fuzz 60s).
fuzz time="30s":
    #!/usr/bin/env bash
    set -euo pipefail
    grep -rHo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*' porch sample | sort | while IFS=: read -r file fn; do
        name=${fn#func }
        printf '\n>>> %s in ./%s for %s\n' "$name" "$(dirname "$file")" '{{time}}'
        go test -run '^$' -fuzz "^${name}\$" -fuzztime '{{time}}' "./$(dirname "$file")"
    done

# A PostgreSQL-only program, built without cgo, served and stopped against PORCH_TEST_POSTGRES, else 127.0.0.1:5432.
pgonly *args:
    CGO_ENABLED=0 go build -o /tmp/porch-pgonly ./internal/tools/pgonly && /tmp/porch-pgonly {{args}}

# api.txt records porch's public API; CI holds the code to it. After a
# deliberate change, regenerate it and say what changed in CHANGELOG.md.

# Rewrite api.txt from the code, after a deliberate change to the public API.
api:
    go run ./internal/tools/apilist > api.txt

# Check that each Go program in README.md is its file under examples/ and builds.
readme:
    go run ./internal/tools/readmecheck
