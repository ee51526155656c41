#!/usr/bin/env bash
# The PARMACS programs (examples/parmacs) at 1-4 ranks: each run's "result:" line must equal the
# 1-rank run's, and every run must report that it matches its own serial computation. With
# --same, every program's result must also equal the first program's (one computation written
# twice: examples/parmacs/sor.C and examples/tmk/sor.c).
#   check_programs.sh <mdsmrun> [--same] <program>...
set -uo pipefail
mdsmrun=$1
shift
same=0
if [[ "${1:-}" == "--same" ]]; then
  same=1
  shift
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() { echo "FAILED: $*" >&2; cat "$out" >&2; exit 1; }

first=""
for prog in "$@"; do
  name=$(basename "$prog")
  one=$first
  for n in 1 2 3 4; do
    start=$SECONDS
    timeout 120 "$mdsmrun" -n $n "$prog" -p$n >"$out" 2>&1 || fail "$name at $n ranks: exit status $?"
    grep -q "^check: matches" "$out" || fail "$name at $n ranks: no match with the serial computation"
    result=$(grep "^result:" "$out") || fail "$name at $n ranks: no result line"
    [[ -n "$one" ]] || one=$result
    [[ "$result" == "$one" ]] || fail "$name at $n ranks: '$result' differs from 1 rank's '$one'"
    echo "$name, $n ranks ($((SECONDS - start)) s): $result"
  done
  [[ $same == 1 ]] && first=$one
done
echo "PARMACS programs agree at 1-4 ranks"
