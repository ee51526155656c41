#!/usr/bin/env bash
# Runs every libFuzzer target for a bounded time (docs/TESTING.md).
#
#   test/fuzz/run_fuzz.sh BUILD_DIR SECONDS_PER_TARGET [WORK_DIR]
#
# BUILD_DIR was set up with clang and -Dfuzz=true (test/sanitizers/run.sh makes build-asan so).
# Each target starts from a copy of its seed corpus and regression inputs in WORK_DIR (default
# BUILD_DIR/fuzz-work), so the checked-in corpus is never modified; new inputs stay there. Prints
# the executions per target; exits non-zero on the first crash, leaving the crashing input in
# WORK_DIR/<target>/artifacts/ (crash-*, leak-*, timeout-* after MDSM_FUZZ_TIMEOUT s, default 25: a
# loaded machine can stall a run for seconds): fix the bug, then keep the input in test/fuzz/regressions/<target>/
# so the normal suite replays it.
set -euo pipefail
build=${1:?build dir}
seconds=${2:?seconds per target}
src=$(cd "$(dirname "$0")" && pwd)
work=${3:-$build/fuzz-work}
targets=(frame cinfo protocol diff noncoherent)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
total=0
for t in "${targets[@]}"; do
  exe=$build/test/fuzz/fuzz_$t
  [[ -x $exe ]] || { echo "run_fuzz: $exe is missing (configure with clang and -Dfuzz=true)" >&2; exit 2; }
  rm -rf "${work:?}/$t"
  mkdir -p "$work/$t/corpus" "$work/$t/artifacts"
  cp "$src/corpus/$t"/* "$work/$t/corpus/"
  cp "$src/regressions/$t"/* "$work/$t/corpus/" 2>/dev/null || true
  log=$work/$t/fuzz.log
  # -rss_limit_mb / -malloc_limit_mb: a decoder that allocates without bound is a finding.
  if ! "$exe" "$work/$t/corpus" -max_total_time="$seconds" -rss_limit_mb=1024 -malloc_limit_mb=256 \
      -timeout=${MDSM_FUZZ_TIMEOUT:-25} -print_final_stats=1 -artifact_prefix="$work/$t/artifacts/" >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "run_fuzz: fuzz_$t FAILED; the input is in $work/$t/artifacts/" >&2
    exit 1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1)
  echo "fuzz_$t: ${runs:-?} executions in ${seconds} s, ${cov:-cov: ?} (corpus $(ls "$work/$t/corpus" | wc -l) inputs)"
  total=$((total + ${runs:-0}))
done
echo "fuzzing: ${#targets[@]} targets, $total executions, no crash"
