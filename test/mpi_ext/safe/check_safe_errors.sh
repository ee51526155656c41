#!/usr/bin/env bash
# Safe mode refuses a bad configuration with a clear message and a non-zero exit:
#   check_safe_errors.sh MDSMRUN LIBMDSM_SAFE PLAIN_MPI_PROGRAM
# 1. MDSM_SAFE_ANNOTATION with an invalid value: the job fails at MPI_Init, and the message (naming
#    the variable, the value and the valid values) is printed once, not once per rank.
# 2. The same program with a valid value runs (so case 1 fails for the reason it should).
set -u
mdsmrun=$1 lib=$2 program=$3
status=0
out=$(MDSM_SAFE_ANNOTATION=sometimes "$mdsmrun" -x LD_PRELOAD="$lib" -x MDSM_SAFE_ANNOTATION -n 2 "$program" 2>&1)
rc=$?
expected='mdsm safe mode: MDSM_SAFE_ANNOTATION="sometimes" is not an annotation; use release (the default), release_nt or none'
if [[ $rc -eq 0 ]]; then
  echo "FAIL: MDSM_SAFE_ANNOTATION=sometimes: the job exited 0"; echo "$out"; status=1
elif [[ $(grep -cF -- "$expected" <<<"$out") -ne 1 ]]; then
  echo "FAIL: MDSM_SAFE_ANNOTATION=sometimes: the message is missing or repeated:"; echo "$out"; status=1
else
  echo "ok: MDSM_SAFE_ANNOTATION=sometimes failed (exit $rc) with: $expected"
fi
out=$(MDSM_SAFE_ANNOTATION=release_nt "$mdsmrun" -x LD_PRELOAD="$lib" -x MDSM_SAFE_ANNOTATION -n 2 "$program" --expect-safe 2>&1)
rc=$?
if [[ $rc -ne 0 ]]; then
  echo "FAIL: MDSM_SAFE_ANNOTATION=release_nt: exit $rc"; echo "$out"; status=1
else
  echo "ok: MDSM_SAFE_ANNOTATION=release_nt runs"
fi
exit $status
