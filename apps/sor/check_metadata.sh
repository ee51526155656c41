#!/usr/bin/env bash
# SOR hybrid never calls a global barrier: its consistency metadata per rank must stay bounded
# by the background collection (issue 20). At the CI size with a 64 KiB threshold and 400
# iterations it peaks at ~135 KB per rank; with MDSM_BACKGROUND_GC=0 it reaches ~2 MB.
#   check_metadata.sh <mdsmrun> <sor> [ranks]
set -euo pipefail
mdsmrun=$1
sor=$2
np=${3:-2}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
MDSM_GC_THRESHOLD=64K MDSM_STATS="json:$out/stats.json" \
  "$mdsmrun" -n "$np" "$sor" --version=hybrid --quick --steps=400 >"$out/run.txt" 2>&1 ||
  { cat "$out/run.txt" >&2; exit 1; }
grep -q "verified=1" "$out/run.txt" || { echo "SOR hybrid did not verify" >&2; cat "$out/run.txt" >&2; exit 1; }
/usr/bin/python3 - "$out/stats.json" <<'PY'
import json, sys
ranks = json.load(open(sys.argv[1]))["ranks"]
bound = 4 * 64 * 1024
for r, c in enumerate(ranks):
    peak, runs = c["metadata_bytes_peak"], c["gc_background_runs"]
    print(f"rank {r}: metadata peak {peak} bytes, {runs} background collections")
    assert runs >= 2, f"rank {r}: only {runs} background collections"
    assert peak <= bound, f"rank {r}: metadata peak {peak} bytes above {bound}"
PY
