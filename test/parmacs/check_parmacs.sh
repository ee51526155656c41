#!/usr/bin/env bash
# The PARMACS macros: parmacs_basics at 1-4 processes (and with an idle rank), then each misuse,
# which must end the job with a message naming the macro (PARMACS macros return nothing).
#   check_parmacs.sh <mdsmrun> <parmacs_basics>
set -uo pipefail
mdsmrun=$1
prog=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() { echo "FAILED: $*" >&2; cat "$out" >&2; exit 1; }

run() {  # run RANKS P: the program must succeed and say all values are right
  timeout 120 "$mdsmrun" -n "$1" "$prog" "$2" >"$out" 2>&1 || fail "$1 ranks, $2 processes: exit status $?"
  grep -q "parmacs_basics: $2 processes, all values right" "$out" || fail "$1 ranks, $2 processes: no verdict"
}
for n in 1 2 3 4; do run $n $n; done
run 3 2  # a rank that is never CREATEd waits for the end and finalizes with the others
# Without a progress thread, parked ranks deliver their messages themselves.
timeout 120 "$mdsmrun" -x MDSM_PROGRESS_THREAD=0 -n 3 "$prog" 3 >"$out" 2>&1 || fail "no progress thread: exit status $?"
grep -q "parmacs_basics: 3 processes, all values right" "$out" || fail "no progress thread: no verdict"
# exit() ends a CREATEd process as a return does.
timeout 120 "$mdsmrun" -n 3 "$prog" 3 worker-exit >"$out" 2>&1 || fail "worker-exit: exit status $?"
grep -q "parmacs_basics: 3 processes, all values right" "$out" || fail "worker-exit: no verdict"
# A return from main without MAIN_END ends the job as MAIN_END does.
timeout 120 "$mdsmrun" -n 3 "$prog" 2 return-from-main >"$out" 2>&1 || fail "return-from-main: exit status $?"
grep -q "parmacs_basics: 2 processes, all values right" "$out" || fail "return-from-main: no verdict"
# exit() in the main process before any CREATE ends every rank, with its status.
timeout 120 "$mdsmrun" -n 3 "$prog" 3 exit-early >"$out" 2>&1
status=$?
[[ $status -eq 3 ]] || fail "exit-early: exit status $status, not 3"
grep -q "parmacs_basics: exit before any CREATE" "$out" || fail "exit-early: no message"

misuse() {  # misuse RANKS P MODE TEXT: the job fails and says TEXT
  if timeout 120 "$mdsmrun" -n "$1" "$prog" "$2" "$3" >"$out" 2>&1; then fail "$3 was not refused"; fi
  grep -qF -- "$4" "$out" || fail "$3: the message does not say '$4'"
}
misuse 2 2 create-in-worker "process 1: CREATE(Work) at"
misuse 2 2 create-in-worker "CREATE in a CREATEd process; only the main process (rank 0) creates processes"
misuse 2 2 too-many-creates "no rank left to run it: the job has 2 ranks and 1 CREATEd process(es) are running"
misuse 2 2 wait-too-many "WAIT_FOR_END(2) at"
misuse 2 2 wait-too-many "waits for 2 processes, but 1 CREATEd process(es) are running; it would wait forever"
misuse 2 2 wait-in-worker "WAIT_FOR_END in a CREATEd process"
misuse 2 2 main-end-in-worker "MAIN_END in a CREATEd process"
misuse 2 2 barrier-count "a barrier for 2 processes (its BARINIT or first BARRIER) used with 3"
misuse 2 2 alock-index "lock 8 is outside the array (ALOCKDEC declared 8)"
misuse 2 2 alockinit-too-many "initializes 9 locks, but ALOCKDEC declared 8"
misuse 2 2 unlock-not-held "process 1: UNLOCK(gl->sumlock) at"
misuse 1 1 lock-uninit "LOCK(never) at"
misuse 1 1 lock-uninit "the lock was never initialized"
misuse 1 1 pause-private "a pause flag must be in shared memory"
misuse 1 1 barinit-private-lazy "a barrier without a count gets it from its first BARRIER"
misuse 1 1 init-twice "MAIN_INITENV ran twice"
misuse 1 1 g-malloc-no-room "no room for 1099511627776 bytes in this process's part of the shared region"
misuse 1 1 before-init "LOCK(early) at"
misuse 1 1 before-init "called before MAIN_INITENV"
echo "PARMACS macro checks passed"
