#!/usr/bin/env bash
# mdsm's own instructions per MDSM_Send and per MDSM_Recv of an 8-byte ping-pong, counted by
# callgrind on both ranks: the inclusive cost of each call minus that of the MPI call it makes
# (PMPI_Send / PMPI_Recv, which include MPI's wait for the peer), over two runs of different
# lengths, so that start-up and shut-down cancel out.
#
#   bench/count_mdsm_mpi.sh [BUILDDIR] [none|release|release_nt ...]
#
# Prints one line per annotation and rank: instructions per send and per receive. Env LIBDIR
# loads another libmdsm.so.0 (as compare_launches.py does) to count an older library; env BYTES
# sets the message size (default 8; a message with its data on the side channel makes two MPI
# sends and two receives, all subtracted).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build-rel}
shift || true
annots=("$@")
[[ ${#annots[@]} -eq 0 ]] && annots=(none release)
short=2000
long=12000
out=$(mktemp -d /tmp/count_mdsm_mpi.XXXXXX)
trap 'rm -rf "$out"' EXIT
env_args=()
[[ -n "${LIBDIR:-}" ]] && env_args=(-x LD_LIBRARY_PATH="$LIBDIR")
incl() {  # incl FILE FUNCTION: the function's inclusive instruction count
  callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
    awk -v f="$2" 'index($0, ":" f " [") { gsub(",", "", $1); s += $1 } END { print s + 0 }'
}
for a in "${annots[@]}"; do
  for n in $short $long; do
    "$here/tools/mdsmrun" -n 2 "${env_args[@]}" valgrind -q --tool=callgrind \
      --callgrind-out-file="$out/$a.$n.%q{OMPI_COMM_WORLD_RANK}" "$build/bench/count_mdsm_mpi" "$a" "$n" "${BYTES:-8}" \
      >"$out/log" 2>&1 || { cat "$out/log"; exit 1; }
  done
  for r in 0 1; do
    declare -A v=()
    for n in $short $long; do
      f="$out/$a.$n.$r"
      v[$n.send]=$(($(incl "$f" MDSM_Send) - $(incl "$f" PMPI_Send)))
      v[$n.recv]=$(($(incl "$f" MDSM_Recv) - $(incl "$f" PMPI_Recv)))
    done
    d=$((long - short))
    printf '%-10s rank %d: %5d instructions per send, %5d per receive\n' "$a" "$r" \
      $(((v[$long.send] - v[$short.send]) / d)) $(((v[$long.recv] - v[$short.recv]) / d))
  done
done
