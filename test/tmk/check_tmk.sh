#!/usr/bin/env bash
# The TreadMarks interface: the program at 1-4 processes, then each misuse, which must end the job
# with a message naming the call (TreadMarks calls return nothing).
#   check_tmk.sh <mdsmrun> <tmk_program>
set -uo pipefail
mdsmrun=$1
prog=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() { echo "FAILED: $*" >&2; cat "$out" >&2; exit 1; }

for n in 1 2 3 4; do
  timeout 120 "$mdsmrun" -n $n "$prog" >"$out" 2>&1 || fail "$n processes: exit status $?"
  grep -q "tmk_program: $n processes, all values right" "$out" || fail "$n processes: no verdict"
done

misuse() {  # misuse MODE TEXT: the job fails and says TEXT
  if timeout 120 "$mdsmrun" -n 2 "$prog" "$1" >"$out" 2>&1; then fail "$1 was not refused"; fi
  grep -q "$2" "$out" || fail "$1: the message does not say '$2'"
}
misuse misuse-lock "Tmk_lock_acquire: lock 1024 does not exist (TMK_NLOCKS is 1024)"
misuse misuse-barrier "Tmk_barrier: barrier 64 does not exist (TMK_NBARRIERS is 64)"
misuse misuse-distribute "Tmk_distribute: the address is not inside a global or static variable"
misuse misuse-before-startup "Tmk_lock_acquire: called before Tmk_startup"
echo "TreadMarks interface checks passed"
