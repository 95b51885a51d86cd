#!/usr/bin/env bash
# The acceptance gate: builds the storefront, starts real storefront processes
# on 127.0.0.1 and checks the rate limiter's and the idempotency keys'
# contracts over real HTTP and in the tables: SQLite, and PostgreSQL shared by
# two instances (PORCH_TEST_POSTGRES, else a dockertest container, else those
# legs skip; PORCH_REQUIRE_POSTGRES=1 makes a skip a failure, as .ci/run
# does), then the chaos legs (acceptance/chaos_test.go).
#
# Arguments go to go test (e.g. -run Kill9); arguments after -- go to the
# gate itself: -duration D and -seed N for the chaos legs, e.g.
#   ./acceptance.sh -run Chaos -- -duration 5m -seed 42
set -euo pipefail
cd "$(dirname "$0")"
gotest=()
while (($#)); do
	if [[ $1 == -- ]]; then
		shift
		break
	fi
	gotest+=("$1")
	shift
done
exec go test -tags acceptance -count=1 -v "${gotest[@]}" ./acceptance/ -args "$@"
