#!/usr/bin/env bash
# Misuse that ends a process: the error must say what happened and what to do.
#   check_misuse.sh <mdsmrun> <misuse_process>
set -uo pipefail
mdsmrun=$1
prog=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() { echo "FAILED: $*" >&2; cat "$out" >&2; exit 1; }

"$mdsmrun" -n 2 "$prog" thread-level >"$out" 2>&1 || fail "thread level below MPI_THREAD_MULTIPLE was not refused"
grep -q "MPI_THREAD_MULTIPLE" "$out" || fail "the refusal does not name MPI_THREAD_MULTIPLE"

if timeout 60 "$mdsmrun" -n 2 "$prog" handler-touch >"$out" 2>&1; then fail "a handler read coherent memory unnoticed"; fi
grep -q "message handler 'reads.coherent.memory' touched coherent memory" "$out" || fail "no message naming the handler"
grep -q "handler read" "$out" && fail "the handler's read completed"
"$mdsmrun" -n 2 "$prog" reinit-after-finalize >"$out" 2>&1 || fail "init after MPI was finalized was not refused"
grep -q "MPI has been finalized" "$out" || fail "the refusal does not say MPI was finalized"
grep -q "MPI is not initialized" "$out" && fail "the refusal says MPI is not initialized, though it was finalized"

echo "misuse process checks passed"
