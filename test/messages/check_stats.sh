#!/usr/bin/env bash
# MDSM_STATS output at finalize: `1` prints the per-rank table, `json:FILE` writes JSON with every
# rank's counters and the totals, and a bad value is refused with a clear error.
#   check_stats.sh <mdsmrun> <demo>
set -euo pipefail
mdsmrun=$1
demo=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
MDSM_STATS=1 "$mdsmrun" -n 2 "$demo" >"$out/table.txt" 2>&1
grep -q "mdsm statistics (2 ranks)" "$out/table.txt"
grep -Eq "^msgs_sent_release +[0-9]+ +[0-9]+ +[0-9]+" "$out/table.txt"
grep -Eq "^messages [0-9]+, average size [0-9]+ bytes" "$out/table.txt"
MDSM_STATS="json:$out/stats.json" "$mdsmrun" -n 2 "$demo" >/dev/null 2>&1
/usr/bin/python3 - "$out/stats.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ranks, total = d["ranks"], d["total"]
assert len(ranks) == 2, ranks
for k, v in total.items():
    if k.endswith("_peak") or k == "metadata_bytes":
        continue
    assert v == sum(r[k] for r in ranks), k
assert total["msgs_sent_release"] > 0 and total["frames_sent"] >= total["msgs_sent_release"]
PY
if MDSM_STATS=bogus "$mdsmrun" -n 2 "$demo" >"$out/bad.txt" 2>&1; then
  echo "MDSM_STATS=bogus was accepted" >&2
  exit 1
fi
grep -q "MDSM_STATS='bogus' is not 0, 1 or json:FILE" "$out/bad.txt"
echo "statistics output checks passed"
