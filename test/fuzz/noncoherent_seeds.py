#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_noncoherent (test/fuzz/fuzz_noncoherent.cpp) into DIR.

    noncoherent_seeds.py test/fuzz/corpus/noncoherent

The non-coherent region's operations carry addresses of a region placed at run time, so seeds are
made for the target's fixed region (k_bounds) rather than captured from a job: one valid payload of
each operation and the edges (the region's first and last bytes, a whole chunk, an empty put chunk,
the highest tag, a free reply with a message). Input: operation byte + payload, integers
little-endian (one_sided.hpp has the layouts)."""
import os
import struct
import sys

BASE, SIZE = 0x7E0000000000, 1 << 30
OPS = dict(get=1, get_reply=2, put=3, put_ack=4, fetch_add=5, compare_swap=6, atomic_reply=7, free=8,
           free_reply=9, put_body=10, get_body=11)


def q(*values):
    return b"".join(struct.pack("<Q", v) for v in values)


SEEDS = {
    "get-first-byte": (OPS["get"], q(BASE, 1)),
    "get-last-chunk": (OPS["get"], q(BASE + SIZE - (256 << 10), 256 << 10)),
    "get-reply": (OPS["get_reply"], q(4096) + bytes(range(64))),
    "put": (OPS["put"], q(BASE + 4096) + b"mdsm" * 16),
    "put-empty-chunk": (OPS["put"], q(BASE + SIZE - 1)),
    "put-ack": (OPS["put_ack"], b""),
    "fetch-add": (OPS["fetch_add"], q(BASE + 8, 1)),
    "compare-swap-last-word": (OPS["compare_swap"], q(BASE + SIZE - 8, 0, 42)),
    "atomic-reply": (OPS["atomic_reply"], q(7)),
    "free": (OPS["free"], q(BASE + (512 << 20))),
    "free-reply-ok": (OPS["free_reply"], struct.pack("<i", 0)),
    "free-reply-why": (OPS["free_reply"], struct.pack("<i", 3) + b"nc_free: not an allocation of this rank"),
    "put-body": (OPS["put_body"], q(BASE + (1 << 20), 1 << 20, 0)),
    "get-body-highest-tag": (OPS["get_body"], q(BASE, 64 << 10, 32766)),
}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, (op, payload) in SEEDS.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(bytes([op]) + payload)


if __name__ == "__main__":
    main()
