#!/usr/bin/env bash
# Runs a program that must die of a segmentation fault after printing a given message.
#   expect_fault.sh MDSMRUN PROGRAM MODE 'expected text'
# Passes if the job fails and its stderr contains the text; prints the output otherwise.
set -u
mdsmrun=$1 program=$2 mode=$3 expected=$4
out=$("$mdsmrun" -n 1 "$program" "$mode" 2>&1)
rc=$?
if [[ $rc -eq 0 ]]; then
  echo "expected $program $mode to fail, but it exited 0"; echo "$out"; exit 1
fi
if ! grep -qF -- "$expected" <<<"$out"; then
  echo "the output of $program $mode lacks: $expected"; echo "$out"; exit 1
fi
echo "$program $mode failed as expected (exit $rc) with: $(grep -F -- "$expected" <<<"$out" | head -1)"
