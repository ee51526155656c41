#!/usr/bin/env python3
"""Sorts frames captured from real jobs (capture_frames.c) into the fuzz targets' seed corpora.

    make_corpus.py CAPTURE_DIR CORPUS_DIR [--per-class N]

A class is (channel, operation or handler, annotation, log2 of the size); at most N frames of each
(first seen, distinct contents, at most 64 KiB) become seeds, so the corpora stay small but cover every kind of
frame the run sent. Each target's input format is in its source file:
  frame     the whole frame
  cinfo     selector (bits 0-1: 0 RELEASE, 3 RELEASE_NT, 1 REQUEST, 2 one interval record;
            bits 2-3: origin) + consistency information
  protocol  selector (the coherence operation; 0 for a coordination payload) + payload
  diff      selector (4096-byte unit, decode mode) + one diff taken from a diff or copy reply
"""
import hashlib
import os
import struct
import sys

HEADER = struct.Struct("<HBBIiIII")  # magic, channel, annotation, handler, origin, payload, cinfo, token
K_LENS = [8, 16, 248, 256, 264, 1024, 4096, 4104, 16384, 16648]
UNIT = 4096
MAX_SEED = 64 * 1024  # larger frames are copies of many units: more bytes to mutate, no new structure


def pieces(buf, at):
    """Yields the diffs of a `pieces` list at buf[at:], returns the offset after it."""
    (count,) = struct.unpack_from("<I", buf, at)
    at += 4
    out = []
    for _ in range(count):
        first, last, serial, length = struct.unpack_from("<IIII", buf, at)
        at += 16
        out.append(buf[at:at + length])
        at += length
    return out, at


def diffs_of(op, payload):
    try:
        (n,) = struct.unpack_from("<I", payload, 0)
        at, out = 4, []
        for _ in range(n):
            at += 4  # unit
            if op == 4:  # copy reply
                status = payload[at]
                at += 1
                if status != 1:
                    break
                at += UNIT
            got, at = pieces(payload, at)
            out += got
        return out
    except (struct.error, IndexError):
        return []


def first_record(cinfo, ranks):
    """The first interval record of a RELEASE's consistency information, if it has one."""
    at = 4 + 4 * ranks
    (count,) = struct.unpack_from("<I", cinfo, at)
    if count == 0:
        return None
    at += 4
    start = at
    at += 8 + 4 + 4 * ranks
    (runs,) = struct.unpack_from("<I", cinfo, at)
    at += 4 + 8 * runs
    return cinfo[start:at]


def main():
    capture, corpus = sys.argv[1], sys.argv[2]
    per_class = int(sys.argv[sys.argv.index("--per-class") + 1]) if "--per-class" in sys.argv else 3
    seen, counts = set(), {}

    def keep(target, cls, data):
        key = (target, cls)
        digest = hashlib.sha1(data).hexdigest()
        if counts.get(key, 0) >= per_class or (target, digest) in seen:
            return
        seen.add((target, digest))
        counts[key] = counts.get(key, 0) + 1
        os.makedirs(os.path.join(corpus, target), exist_ok=True)
        with open(os.path.join(corpus, target, digest[:16]), "wb") as f:
            f.write(data)

    for name in sorted(os.listdir(capture)):
        with open(os.path.join(capture, name), "rb") as f:
            frame = f.read()
        if len(frame) < HEADER.size or len(frame) > MAX_SEED:
            continue
        magic, chan, annot, handler, origin, plen, clen, token = HEADER.unpack_from(frame)
        if HEADER.size + plen + clen != len(frame):
            continue
        payload = frame[HEADER.size:HEADER.size + plen]
        cinfo = frame[HEADER.size + plen:]
        size_class = len(frame).bit_length()
        op = handler if chan == 2 else 0
        keep("frame", (chan, op, annot, size_class), frame)
        if chan == 2:
            keep("protocol", (op, size_class), bytes([op]) + payload)
            for d in diffs_of(op, payload):
                keep("diff", len(d).bit_length(), bytes([K_LENS.index(UNIT) << 1]) + d)
        elif chan == 3:
            keep("protocol", (0, size_class), bytes([0]) + payload)
            if annot == 1:
                keep("cinfo", (1, len(cinfo).bit_length()), bytes([1]) + cinfo)
            elif annot in (2, 3):
                selector = (0 if annot == 2 else 3) | ((origin & 3) << 2)
                keep("cinfo", (annot, len(cinfo).bit_length()), bytes([selector]) + cinfo)
                ranks = struct.unpack_from("<I", cinfo, 0)[0]
                record = first_record(cinfo, ranks)
                if record:
                    keep("cinfo", (4, len(record).bit_length()), bytes([2]) + record)
    totals = {}
    for (target, _), n in counts.items():
        totals[target] = totals.get(target, 0) + n
    print(" ".join(f"{t}: {n} seeds" for t, n in sorted(totals.items())))


if __name__ == "__main__":
    main()
