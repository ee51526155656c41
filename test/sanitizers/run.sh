#!/usr/bin/env bash
# The sanitizer and fuzzing stage of `./quickstart test` (docs/TESTING.md), after the normal suite:
#
#   1. ASan+UBSan (clang, build-asan): the unit tests, the multi-rank tests on 2 and 3 ranks, the
#      examples, the misuse and fault checks, the install check and the fuzz inputs' replay;
#   2. fuzzing: every libFuzzer target for MDSM_FUZZ_SECONDS (default 20) each, in build-asan;
#   3. TSan (clang, build-tsan): the unit tests and the multi-rank tests on 2 and 3 ranks.
#
# Each stage prints what it runs and what it skips, and why. Environment:
#   MDSM_SANITIZERS=0     skip all of it (say so); MDSM_FUZZ_SECONDS=N  fuzzing time per target
#   MDSM_ASAN_BUILD_DIR, MDSM_TSAN_BUILD_DIR   build directories (default build-asan, build-tsan)
# Both builds leave out the applications and benchmarks (-Dapps=false -Dbenchmarks=false): the
# stage must fit the CI budget, and the multi-rank tests exercise the same library paths.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
cd "$src"
here=$src/test/sanitizers
asan=${MDSM_ASAN_BUILD_DIR:-build-asan}
tsan=${MDSM_TSAN_BUILD_DIR:-build-tsan}
fuzz_seconds=${MDSM_FUZZ_SECONDS:-20}

if [[ "${MDSM_SANITIZERS:-1}" == 0 ]]; then
  echo "sanitizers: SKIPPED all sanitizer and fuzz runs (MDSM_SANITIZERS=0)"
  exit 0
fi
for tool in clang clang++; do
  command -v "$tool" >/dev/null || { echo "sanitizers: $tool is missing (./quickstart test installs it)" >&2; exit 1; }
done

# Sanitizer builds compile at -O1 with line tables only (enough for symbolized reports): about
# half the compile time of -O2 -g, which matters more here than the run time.
setup() {  # dir, "targets...", meson options...
  local dir=$1 targets=$2
  shift 2
  [[ -f "$dir/build.ninja" ]] || CC=clang CXX=clang++ meson setup "$dir" -Dwerror=true -Dapps=false -Dbenchmarks=false \
    -Doptimization=1 -Ddebug=false -Dc_args=-gline-tables-only -Dcpp_args=-gline-tables-only "$@"
  # shellcheck disable=SC2086 # a list of targets
  ninja -C "$dir" $targets
}

# Open MPI's MCA components are dlopen'ed; kept loaded, their frames keep names in reports (and
# for the suppressions).
export OMPI_MCA_mca_base_component_disable_dlclose=1 PMIX_MCA_mca_base_component_disable_dlclose=1

echo "=== sanitizers 1/3: ASan+UBSan ($asan)"
setup "$asan" "test/unit_tests test/mpi_tests test/globals_tests examples/demo examples/hello_c \
  test/misuse_process test/fault_helper $(for t in frame cinfo protocol diff; do echo test/fuzz/fuzz_$t test/fuzz/fuzz_${t}_replay; done)" \
  -Db_sanitize=address,undefined -Db_lundef=false -Dfuzz=true
# handle_segv=1 + allow_user_segv_handler=1: mdsm installs its SIGSEGV handler after ASan's (the
# DSM takes faults on protected pages of the coherent region) and chains to ASan's for any other
# address, so a real wild access still gets ASan's report.
asan_common="handle_segv=1:allow_user_segv_handler=1:abort_on_error=1:symbolize=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export LSAN_OPTIONS="suppressions=$here/lsan.supp:print_suppressions=0"
# Programs that run MPI: no leak detection. Open MPI, PMIx and hwloc keep what MPI_Init
# allocates until exit; with ASan's fast unwinder those stacks stop after a frame or two inside
# libraries built without frame pointers, often in dlopen'ed components that show as
# <unknown module>, so no suppression can name them; the slow unwinder (fast_unwind_on_malloc=0)
# names them all and lsan.supp then suppresses every one (the unit tests and the demo come out
# clean), but it makes every allocation several times slower: the 2-rank demo took 3 minutes.
# The decoders, where a leak would come from input, are leak-checked below and by the fuzzers.
mpi_tests=(unit "mpi 2 ranks" "mpi 3 ranks" "make_coherent 3 ranks" "demo 2 ranks" "hello_c 2 ranks" "misuse that ends a process"
  "unallocated access (unallocated)" "unallocated access (freed)" install)
echo "runs, without leak detection (MPI; see the comment in run.sh): ${mpi_tests[*]}"
echo "skips: 'mpi 4 ranks', 'demo 3/4 ranks' (4 sanitized ranks on 2 cores cost minutes and add no code path"
echo "       over 3), 'statistics output' (reruns the demo 3 times), 'cluster' (network namespaces: the normal"
echo "       suite runs it), the applications and benchmarks (not built: -Dapps=false -Dbenchmarks=false)"
ASAN_OPTIONS="$asan_common:detect_leaks=0" meson test -C "$asan" --no-rebuild --num-processes 1 --print-errorlogs "${mpi_tests[@]}"
fuzz_replays=("fuzz inputs (frame)" "fuzz inputs (cinfo)" "fuzz inputs (protocol)" "fuzz inputs (diff)" "fuzz inputs (noncoherent)")
echo "runs, with leak detection: ${fuzz_replays[*]}"
ASAN_OPTIONS="$asan_common:detect_leaks=1" meson test -C "$asan" --no-rebuild --num-processes 1 --print-errorlogs "${fuzz_replays[@]}"

echo "=== sanitizers 2/3: fuzzing, $fuzz_seconds s per target ($asan)"
ASAN_OPTIONS="$asan_common:detect_leaks=1" "$src/test/fuzz/run_fuzz.sh" "$asan" "$fuzz_seconds"

echo "=== sanitizers 3/3: TSan ($tsan)"
setup "$tsan" "test/unit_tests test/mpi_tests test/globals_tests" -Db_sanitize=thread -Db_lundef=false
# report_signal_unsafe=0: the fault handler runs the DSM protocol (allocation, MPI) inside the
# SIGSEGV of a synchronous fault on the coherent region, on purpose (docs/COHERENCE.md); TSan
# would flag every such call as async-signal-unsafe. Races are not affected.
# detect_deadlocks=0: TSan's lock-order detector tracks at most 64 locks held by one thread and
# aborts beyond (a CHECK failure in sanitizer_deadlock_detector.h); a protection batch holds the
# page locks of a whole run of units, up to 1024 (coherence/protection_batch.hpp explains why its
# order cannot deadlock). Data races are still detected.
export TSAN_OPTIONS="suppressions=$here/tsan.supp:report_signal_unsafe=0:detect_deadlocks=0:halt_on_error=1"
tsan_tests=(unit "mpi 2 ranks" "mpi 3 ranks" "make_coherent 3 ranks")
echo "runs: ${tsan_tests[*]}"
echo "skips: 'mpi 4 ranks' (time), the process-ending and install checks (ASan covers them), fuzz inputs (single-threaded)"
meson test -C "$tsan" --no-rebuild --num-processes 1 --print-errorlogs "${tsan_tests[@]}"
echo "sanitizers: all stages passed"
