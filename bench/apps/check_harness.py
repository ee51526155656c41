#!/usr/bin/python3
"""Test: runs the table harness on a small configuration and checks what it wrote.

    check_harness.py BUILD_DIR OUT_DIR
Runs run_tables.py --apps matmul --ranks 1,2 --quick --repeat 2 --no-plots (without the machine
lock or the wait for an idle machine: the test is no measurement, and `meson test` may run under
the lock itself) and checks OUT_DIR's CSV files: the documented headers, one verified row per
version (the mdsm versions and the plain-MPI one) and rank count, medians inside their ranges,
per-rank breakdowns that add up (consistency work timed in the mdsm versions at 2 ranks, none in
plain MPI's), and runs interleaved by repetition.
"""
import csv
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_tables  # noqa: E402

DOCUMENTED_HEADER = ("app,version,ranks,oversubscribed,runs,time_s,time_min_s,time_max_s,speedup,speedup_min,"
                     "speedup_max,messages,avg_msg_bytes,diffs,diff_requests,verified")
REPEAT = 2


def read(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0] if rows else None, [dict(zip(rows[0], r)) for r in rows[1:]]


def check(build, out):
    cmd = [sys.executable, str(Path(run_tables.__file__)), "--apps", "matmul", "--ranks", "1,2", "--quick",
           "--repeat", str(REPEAT), "--no-plots", "--no-lock", "--idle-wait", "0", "--build", str(build),
           "--out", str(out)]
    print("$", " ".join(cmd), flush=True)
    rc = subprocess.run(cmd).returncode
    if rc != 0:
        return f"harness exited with {rc}"

    header, body = read(out / "apps.csv")
    if header != run_tables.CSV_HEADER or ",".join(header) != DOCUMENTED_HEADER:
        return f"apps.csv: header {header} differs from the documented one"
    versions = run_tables.APPS["matmul"][1]
    if run_tables.MPI_VERSION not in versions:
        return f"matmul has no {run_tables.MPI_VERSION} version: {versions}"
    want = {("matmul", v, str(n)) for v in versions for n in (1, 2)}
    got = {(r["app"], r["version"], r["ranks"]) for r in body}
    if got != want:
        return f"apps.csv: rows {sorted(got)}, expected {sorted(want)}"
    for r in body:
        t, lo, hi = float(r["time_s"]), float(r["time_min_s"]), float(r["time_max_s"])
        if r["verified"] != "1" or r["runs"] != str(REPEAT) or not 0 < lo <= t <= hi:
            return f"apps.csv: bad row {r}"
        s, s_lo, s_hi = float(r["speedup"]), float(r["speedup_min"]), float(r["speedup_max"])
        if not (0 < s_lo <= s <= s_hi):
            return f"apps.csv: speedup outside its range: {r}"
        if r["ranks"] == "1" and not s == s_lo == s_hi == 1:
            return f"apps.csv: speedup at 1 rank is not 1: {r}"
        if r["ranks"] == "2" and int(r["messages"]) == 0:
            return f"apps.csv: no messages counted at 2 ranks: {r}"

    header, ranks = read(out / "apps_ranks.csv")
    if header != run_tables.RANK_CSV_HEADER:
        return f"apps_ranks.csv: header {header}"
    if len(ranks) != sum(int(n) for _, _, n in want):
        return f"apps_ranks.csv: {len(ranks)} rows for {sorted(want)}"
    for p in ranks:
        parts = sum(float(p[k]) for k in ("compute_s", "fault_s", "sync_wait_s", "coherence_s", "gc_s"))
        if abs(parts - float(p["time_s"])) > 1e-5 or min(float(p[k]) for k in run_tables.RANK_CSV_HEADER[4:]) < 0:
            return f"apps_ranks.csv: the breakdown does not add up to the time: {p}"
    # Releases and acquires at 2 ranks do consistency work the mdsm versions time; plain MPI has none.
    if sum(float(p["coherence_s"]) for p in ranks if p["ranks"] == "2" and p["version"] != run_tables.MPI_VERSION) <= 0:
        return "apps_ranks.csv: no consistency work timed in the mdsm versions at 2 ranks"
    if any(float(p["coherence_s"]) != 0 for p in ranks if p["version"] == run_tables.MPI_VERSION):
        return "apps_ranks.csv: consistency work in the plain-MPI version"

    header, runs = read(out / "apps_runs.csv")
    if header != run_tables.RUNS_CSV_HEADER:
        return f"apps_runs.csv: header {header}"
    if len(runs) != REPEAT * len(want):
        return f"apps_runs.csv: {len(runs)} runs, expected {REPEAT * len(want)}"
    order = [int(r["repeat"]) for r in runs]
    if order != sorted(order) or {(r["app"], r["version"], r["ranks"]) for r in runs if r["repeat"] == "0"} != want:
        return f"apps_runs.csv: runs not interleaved (every configuration once per repetition): {order}"
    print(f"apps.csv ({len(body)} rows), apps_ranks.csv ({len(ranks)}), apps_runs.csv ({len(runs)}): OK")
    return None


def main():
    problem = check(Path(sys.argv[1]), Path(sys.argv[2]))
    if problem:
        print(problem)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
