#!/usr/bin/env bash
# The acceptance gate: builds the storefront, starts real storefront processes
# on 127.0.0.1 and checks the rate limiter's and the idempotency keys'
# contracts over real HTTP and in the tables: SQLite, and PostgreSQL shared by
# two instances (PORCH_TEST_POSTGRES, else a server at
# postgres://postgres@127.0.0.1:5432/test, else a dockertest container, else
# those legs skip; the failover legs start a primary and a standby of their
# own with initdb and pg_basebackup, found on PATH or in
# /usr/lib/postgresql/N/bin, else skip; PORCH_REQUIRE_POSTGRES=1 makes a skip
# a failure, as .ci/run does), Redis for the limiter's counters (PORCH_TEST_REDIS, else
# 127.0.0.1:6379, with redis-server on PATH for the legs that kill or
# cluster one; PORCH_REQUIRE_REDIS=1 likewise), then the chaos legs
# (acceptance/chaos_test.go). The last line says which legs were skipped: a
# PASS above it covers only the legs that ran.
#
# Arguments go to go test (e.g. -run Kill9); arguments after -- go to the
# gate itself: -duration D and -seed N for the chaos legs, e.g.
#   ./acceptance.sh -run Chaos -- -duration 5m -seed 42
set -euo pipefail
case ${1:-} in
-h | -help | --help)
	# The usage is this file's opening comment.
	sed -n '2,/^$/{/^#/!q;s/^# \{0,1\}//;p}' "$0"
	exit 0
	;;
esac
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

# The filter passes go test's output through as it comes (fflush: the legs
# take minutes, and a reader watches them) and counts the --- SKIP lines, top
# level and subtests alike; pgtest's skip reason says "no postgres".
summarize() {
	awk '
		{ print; fflush() }
		/no postgres:/ { nopg = 1 }
		/no redis:/ { noredis = 1 }
		/^ *--- SKIP: / { n++; names = names " " $3 }
		END {
			if (n == 0) { print "acceptance: no legs skipped"; exit }
			why = nopg ? " (no PostgreSQL: set PORCH_TEST_POSTGRES=<dsn>, or PORCH_REQUIRE_POSTGRES=1 to fail instead)" : ""
			if (noredis) why = why " (no Redis: set PORCH_TEST_REDIS=<host:port>, or PORCH_REQUIRE_REDIS=1 to fail instead)"
			printf "acceptance: %d legs skipped%s:%s\n", n, why, names
		}'
}
# The gate's status is go test's, as when it was exec'd, not the filter's.
set +e
go test -tags acceptance -count=1 -v "${gotest[@]}" ./acceptance/ -args "$@" | summarize
status=("${PIPESTATUS[@]}")
set -e
if ((status[0] == 0 && status[1] != 0)); then
	exit "${status[1]}"
fi
exit "${status[0]}"
