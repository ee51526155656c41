#!/usr/bin/python3
"""Compares library builds (or settings) on the applications, launch by launch.

The apps' own table (run_tables.py) measures one build. To see what a library change does to an
app on our noisy 2-core VMs, the builds must alternate run by run: this runs every (app,
variant) pair N times in rounds (app 1 variant A, app 1 variant B, app 2 variant A, ...), takes
the time each run reports on its MDSM_APP line, refuses runs that did not verify, and prints
each pair's median and range, plus each variant's median ratio to the first variant.

A variant is NAME=LIBDIR[:VAR=VALUE,...], as in bench/compare_launches.py: LIBDIR holds the
libmdsm.so.0 to load instead of the linked one ('-' keeps it); the settings apply to that
variant only. An app is 'LABEL=PROGRAM ARGS...' relative to the build directory:

    mkdir -p /tmp/old && cp -a build-rel/lib/libmdsm.so* /tmp/old/      # before the change
    ... rebuild ...
    /usr/bin/python3 bench/apps/compare_libs.py -n 4 --build build-rel old=/tmp/old new=- \\
        --app 'apsp barrier=apps/apsp/apsp --size=1536 --version=barrier' \\
        --app 'sor barrier=apps/sor/sor --size=2048 --steps=250 --version=barrier'

Each run takes the same machine lock as run_tables.py (/tmp/mdsm-machine.lock), so timed runs
do not overlap each other.
"""

import argparse
import fcntl
import os
import re
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def parse_variant(spec):
    name, _, rest = spec.partition("=")
    libdir, _, settings = rest.partition(":")
    env = dict(kv.split("=", 1) for kv in settings.split(",") if kv)
    if not name or not libdir:
        raise SystemExit(f"compare_libs: variant '{spec}' is not NAME=LIBDIR[:VAR=VALUE,...]")
    return name, libdir, env


def run_once(build, ranks, program, libdir, env):
    cmd = [str(ROOT / "tools" / "mdsmrun"), "-n", str(ranks)]
    child_env = dict(os.environ)
    exports = dict(env)
    if libdir != "-":
        exports["LD_LIBRARY_PATH"] = str(Path(libdir).resolve())
    for k, v in exports.items():
        child_env[k] = v
        cmd += ["-x", k]
    argv = shlex.split(program)
    cmd += [str(Path(build) / argv[0])] + argv[1:]
    out = subprocess.run(cmd, env=child_env, capture_output=True, text=True, timeout=600).stdout
    m = re.search(r"^MDSM_APP .*time_s=([0-9.]+) verified=(\d)", out, re.M)
    if not m:
        raise SystemExit(f"compare_libs: no MDSM_APP line from: {' '.join(cmd)}\n{out[-2000:]}")
    if m.group(2) != "1":
        raise SystemExit(f"compare_libs: a run did not verify: {' '.join(cmd)}")
    return float(m.group(1))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("variants", nargs="+", help="NAME=LIBDIR[:VAR=VALUE,...]")
    p.add_argument("--app", action="append", required=True, help="'LABEL=PROGRAM ARGS' (repeatable)")
    p.add_argument("--build", default="build-rel", help="build directory holding the programs")
    p.add_argument("-n", "--repeat", type=int, default=4, help="runs per app and variant")
    p.add_argument("--ranks", type=int, default=2)
    a = p.parse_args()
    variants = [parse_variant(v) for v in a.variants]
    apps = []
    for spec in a.app:
        label, _, program = spec.partition("=")
        if not program:
            p.error(f"--app '{spec}' is not LABEL=PROGRAM ARGS")
        apps.append((label, program))
    times = {(label, name): [] for label, _ in apps for name, _, _ in variants}
    with open("/tmp/mdsm-machine.lock", "w") as lock:
        for r in range(a.repeat):
            for label, program in apps:
                for name, libdir, env in variants:
                    fcntl.flock(lock, fcntl.LOCK_EX)
                    try:
                        t = run_once(a.build, a.ranks, program, libdir, env)
                    finally:
                        fcntl.flock(lock, fcntl.LOCK_UN)
                    times[(label, name)].append(t)
                    print(f"  [{r + 1}/{a.repeat}] {label} {name}: {t:.3f} s", file=sys.stderr, flush=True)
    first = variants[0][0]
    print(f"{a.ranks} ranks, {a.repeat} runs each, alternating; median time (s) [range], ratio to {first}")
    for label, _ in apps:
        base = statistics.median(times[(label, first)])
        for name, _, _ in variants:
            v = times[(label, name)]
            med = statistics.median(v)
            print(f"{label:24} {name:12} {med:7.3f} [{min(v):.3f}-{max(v):.3f}]  {med / base:5.3f}")


if __name__ == "__main__":
    main()
