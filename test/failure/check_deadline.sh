#!/usr/bin/env bash
# The failure detector: a rank that stops makes the others end the job within the wait deadline,
# with a report of which rank waited, for what, and whose answer never came; a rank slower than
# the deadline is not ended.
#   check_deadline.sh <mdsmrun> <stopped_rank>
set -uo pipefail
mdsmrun=$1
prog=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() { echo "FAILED: $*" >&2; cat "$out" >&2; exit 1; }

# expect_detected <mode> <ranks> <pattern>...: the job ends with status 75 and a report matching
# every pattern, within the deadline plus start-up and clean-up.
expect_detected() {
  local mode=$1 ranks=$2
  shift 2
  local start=$SECONDS status
  MDSM_WAIT_DEADLINE_S=2 timeout 60 "$mdsmrun" -n "$ranks" "$prog" "$mode" >"$out" 2>&1
  status=$?
  ((status == 124)) && fail "$mode: the job hung until the test's timeout"
  ((status == 75)) || fail "$mode: exit status $status, not the failure detector's 75"
  grep -q "NOT DETECTED" "$out" && fail "$mode: a wait on the stopped rank returned"
  grep -q "has waited .* longer than the wait deadline (MDSM_WAIT_DEADLINE_S=2)" "$out" ||
    fail "$mode: no failure-detector report"
  for p in "$@"; do grep -q -- "$p" "$out" || fail "$mode: the report lacks '$p'"; done
  echo "$mode: detected in $((SECONDS - start)) s"
}

expect_detected barrier 3 "barrier::arrive_and_wait: barrier #"
# rank 0 (the manager) names the missing rank; rank 1 its manager
grep -q "rank 0 has waited .*the manager waits for the arrival of rank(s) 2" "$out" ||
  grep -q "rank 1 has waited .*an answer from rank 0 (its manager" "$out" || fail "barrier: the report names no rank"
expect_detected lock 2 "rank 0 has waited .* for mutex::lock: mutex #1, an answer from rank 1 (the rank that asked for it before"
expect_detected page 2 "rank 0 has waited .* for the writes (diffs) of coherent memory this rank touched: unit #" \
  "no reply yet from rank(s) 1"

# A collective call made by one rank only: rank 0's report names the call, rank 1's its own
# collective step (on a loaded machine mpirun may drop one of the two as the abort spreads).
expect_detected handler 2 "has waited .* for \(register_handler (collective: .*handler 'only.on.rank.zero'\|every rank to reach the same collective step\)"

start=$SECONDS
MDSM_WAIT_DEADLINE_S=10 SLOW_MS=2500 timeout 60 "$mdsmrun" -n 2 "$prog" slow >"$out" 2>&1 ||
  fail "slow: a rank stopped for 2.5 s was ended with a 10 s deadline"
grep -q "slow rank tolerated" "$out" || fail "slow: the job did not finish normally"
echo "slow: a rank stopped for 2.5 s was waited for (deadline 10 s), $((SECONDS - start)) s"
echo "failure detector checks passed"
