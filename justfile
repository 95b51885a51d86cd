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

# Fail on a relative link in README.md or docs/*.md that does not resolve.
linkcheck:
    go run ./internal/tools/linkcheck

# Benchmarks of the porch packages (a placeholder until the benchmark harness lands).
bench:
    go test -run '^$' -bench . -benchmem ./porch/...
