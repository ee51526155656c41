#!/usr/bin/env bash
# Cross-host test: the multi-rank test suite, every application, the PARMACS programs and the
# failure detector across 4 hosts (network namespaces joined by a bridge, Open MPI over TCP
# only), and the flow-control floods also between 2 hosts, using the workplace's netns-cluster
# script. Skipped (exit 77) when it cannot run here: not root, no netns-cluster, or namespaces
# not permitted.
#   check_cluster.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=$1
src=$2
cluster=${MDSM_NETNS_CLUSTER:-$src/../shared/cluster/netns-cluster}
if [[ $(id -u) -ne 0 ]]; then echo "skip: needs root for network namespaces"; exit 77; fi
if [[ ! -x $cluster ]]; then echo "skip: no netns-cluster at $cluster (set MDSM_NETNS_CLUSTER)"; exit 77; fi
# netns-cluster's own `down` forgets hosts whose state file an aborted run lost; a namespace
# h1..h4 or bridge left behind that way makes `up` fail. Clear them and try once more.
clear_stale() {
  for h in h1 h2 h3 h4; do
    if ip netns list 2>/dev/null | grep -qw "^$h"; then
      echo "removing network namespace $h left behind by an earlier run"
      ip netns del "$h" 2>/dev/null || true
    fi
  done
  ip link del mdsmbr0 2>/dev/null || true
}
if ! "$cluster" up 4; then
  "$cluster" down >/dev/null 2>&1
  clear_stale
  if ! "$cluster" up 4; then
    "$cluster" down >/dev/null 2>&1
    echo "skip: could not create network namespaces here"
    exit 77
  fi
fi

status=0
out=$(mktemp)
trap '"$cluster" down >/dev/null 2>&1; rm -f "$out"' EXIT
# A launch sometimes fails before any rank starts: Open MPI's daemons cannot connect right after
# the previous job's have gone, or one crashes writing its hwloc topology to shared memory (all
# "hosts" share one kernel here). Those are retried; a failure of the program itself is not.
#   launch SECONDS mpirun-args...   output in $out, the job's exit status as its own
launch() {
  local seconds=$1 rc=0
  shift
  for attempt in 1 2 3; do
    timeout "$seconds" "$cluster" mpirun "$@" >"$out" 2>&1
    rc=$?
    ((rc == 0)) && return 0
    grep -q -e "unable to complete a TCP connection" -e "ORTE was unable to reliably start" "$out" ||
      return $rc
    echo "(launch failed before the job started; retrying)"
    sleep 2
  done
  return $rc
}
run() {
  echo "== $*"
  launch 600 "$@"
  local rc=$?
  cat "$out"
  if ((rc != 0)); then
    echo "FAILED across hosts: $*"
    status=1
  fi
}
run -n 4 "$build/test/mpi_tests"
# Flow control between two hosts as well (the 4-host run above includes the [flow] cases too):
# MPI over TCP buffers what a rank has not taken in, so these fail without credits.
run -n 2 "$build/test/mpi_tests" "[flow]"
# Every application, its hybrid version (locks or barriers, messages with pointers, faults).
run -n 3 "$build/apps/water/water" --version=hybrid --quick
run -n 4 "$build/apps/quicksort/quicksort" --version=hybrid1 --quick
run -n 4 "$build/apps/tsp/tsp" --version=hybrid --quick
run -n 4 "$build/apps/tsp/tsp" --version=fibers --quick  # fibers across hosts
run -n 4 "$build/apps/matmul/matmul" --version=hybrid --quick
run -n 4 "$build/apps/apsp/apsp" --version=hybrid --quick
run -n 4 "$build/apps/sor/sor" --version=hybrid --quick
# The PARMACS programs (CREATE sends the main process's globals to each host; each checks itself).
run -n 4 "$build/examples/parmacs/parmacs_lu" -p4
run -n 4 "$build/examples/parmacs/parmacs_radix" -p4
run -n 4 "$build/examples/parmacs/parmacs_sor" -p4 -m4000  # fewer deposits: each may take a remote lock
# The failure detector across hosts: a stopped rank ends the job (status 75) with a report.
echo "== failure detector: a rank stopped before a barrier"
launch 120 -x MDSM_WAIT_DEADLINE_S=3 -n 4 "$build/test/stopped_rank" barrier
detector=$?
cat "$out"
if ((detector != 75)) || ! grep -q "has waited .* for barrier::arrive_and_wait" "$out"; then
  echo "FAILED across hosts: the failure detector (exit status $detector, 75 expected, and a report)"
  status=1
fi
exit $status
