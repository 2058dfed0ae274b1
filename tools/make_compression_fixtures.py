#!/usr/bin/python3
"""Writes tests/fixtures/gradient_compression.json: the expected packed bits, residuals and
server sums of MXNet 1.9's gradient compression for a few pushes of two workers.

    /usr/bin/python3 tools/make_compression_fixtures.py    # NumPy; no MXNet needed

Written from MXNet's published algorithm (src/kvstore/gradient_compression-inl.h, 1.9.1),
with NumPy's whole-array operations rather than Tally's per-byte loops, so that a mistake in
one is not repeated in the other. Per value, in float32:
  2bit  r += g; r >= t: code 11, r -= t; else r <= -t: code 10, r -= (-t); else code 00.
        4 codes a byte, the first in the top bits; bytes padded to whole 4-byte words.
        Dequantised: 11 -> t, 10 -> -t, anything else -> 0.
  1bit  r += g; r > t: bit 1, r -= 1; else bit 0, r += 1. 8 bits a byte, the first in the
        top bit; padded to whole words. Dequantised: 1 -> +1, 0 -> -1.
The server sums the workers' dequantised pushes in float32, worker 0 first.

Floats are stored as their 32-bit patterns (hex), packed bytes as one hex string.
"""
import json
import os

import numpy as np

F32 = np.float32
CASES = [  # name, type, threshold, values, gradient scale, seed
    ("two_bit_37", "2bit", 0.5, 37, 0.6, 1),
    ("two_bit_64_small_threshold", "2bit", 0.125, 64, 0.3, 2),
    ("two_bit_300", "2bit", 0.5, 300, 1.5, 3),
    ("one_bit_45", "1bit", 0.0, 45, 0.8, 4),
    ("one_bit_70_threshold", "1bit", 0.25, 70, 2.0, 5),
]
WORKERS = 2
PUSHES = 4


def quantize(kind, t, grad, residual):
    r = (residual + grad).astype(F32)
    if kind == "2bit":
        pos = r >= F32(t)
        neg = ~pos & (r <= F32(-t))
        r = np.where(pos, r - F32(t), np.where(neg, r - F32(-t), r)).astype(F32)
        codes = np.where(pos, 3, np.where(neg, 2, 0)).astype(np.uint8)
        per_word = 16
        padded = np.zeros(-(-len(r) // per_word) * per_word, np.uint8)
        padded[: len(codes)] = codes
        quads = padded.reshape(-1, 4)
        packed = (quads[:, 0] << 6) | (quads[:, 1] << 4) | (quads[:, 2] << 2) | quads[:, 3]
    else:
        up = r > F32(t)
        r = np.where(up, r - F32(1), r + F32(1)).astype(F32)
        padded = np.zeros(-(-len(r) // 32) * 32, np.uint8)
        padded[: len(up)] = up
        packed = np.packbits(padded)  # most significant bit first
    return packed.astype(np.uint8), r


def dequantize(kind, t, packed, n):
    if kind == "2bit":
        bytes_ = np.repeat(packed, 4)
        shifts = np.tile(np.array([6, 4, 2, 0], np.uint8), len(packed))
        codes = (bytes_ >> shifts) & 3
        values = np.where(codes == 3, F32(t), np.where(codes == 2, F32(-t), F32(0)))
    else:
        bits = np.unpackbits(packed)
        values = np.where(bits == 1, F32(1), F32(-1))
    return values[:n].astype(F32)


def bits_hex(a):
    return [format(int(x), "08x") for x in np.asarray(a, F32).view(np.uint32)]


def make_case(name, kind, t, n, scale, seed):
    rng = np.random.default_rng(seed)
    residuals = [np.zeros(n, F32) for _ in range(WORKERS)]
    pushes = []
    for step in range(PUSHES):
        workers = []
        total = np.zeros(n, F32)
        for w in range(WORKERS):
            grad = (rng.uniform(-1, 1, n) * scale).astype(F32)
            packed, residuals[w] = quantize(kind, t, grad, residuals[w])
            total = (total + dequantize(kind, t, packed, n)).astype(F32)
            workers.append({"grad": bits_hex(grad), "packed": packed.tobytes().hex(),
                            "residual": bits_hex(residuals[w])})
        pushes.append({"step": step, "workers": workers, "sum": bits_hex(total)})
    return {"name": name, "type": kind, "threshold": t, "n": n, "pushes": pushes}


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = os.path.join(root, "tests", "fixtures", "gradient_compression.json")
    doc = {"workers": WORKERS, "cases": [make_case(*c) for c in CASES]}
    with open(out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print("wrote", out)


if __name__ == "__main__":
    main()
