#!/usr/bin/python3
"""Test: runs the table harness on a small configuration and checks what it wrote.

    check_harness.py BUILD_DIR OUT_DIR
Runs run_tables.py --apps matmul --ranks 1,2 --quick --no-plots and checks that OUT_DIR/apps.csv
has the documented header and one verified row per version and rank count.
"""
import csv
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_tables  # noqa: E402


def main():
    build, out = Path(sys.argv[1]), Path(sys.argv[2])
    cmd = [sys.executable, str(Path(run_tables.__file__)), "--apps", "matmul", "--ranks", "1,2", "--quick",
           "--no-plots", "--build", str(build), "--out", str(out)]
    print("$", " ".join(cmd), flush=True)
    rc = subprocess.run(cmd).returncode
    if rc != 0:
        print(f"harness exited with {rc}")
        return 1
    with open(out / "apps.csv", newline="") as f:
        rows = list(csv.reader(f))
    if not rows or rows[0] != run_tables.CSV_HEADER:
        print(f"bad header: {rows[0] if rows else None}")
        return 1
    if ",".join(rows[0]) != "app,version,ranks,oversubscribed,time_s,speedup,messages,avg_msg_bytes,diffs,diff_requests,verified":
        print("header differs from the documented one")
        return 1
    body = [dict(zip(rows[0], r)) for r in rows[1:]]
    want = {("matmul", v, str(n)) for v in run_tables.APPS["matmul"][1] for n in (1, 2)}
    got = {(r["app"], r["version"], r["ranks"]) for r in body}
    if got != want:
        print(f"rows {sorted(got)}, expected {sorted(want)}")
        return 1
    for r in body:
        if r["verified"] != "1" or float(r["time_s"]) <= 0 or not r["speedup"]:
            print(f"bad row {r}")
            return 1
        if r["ranks"] == "2" and int(r["messages"]) == 0:
            print(f"no messages counted at 2 ranks: {r}")
            return 1
    print(f"apps.csv: header and {len(body)} rows OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
