#!/usr/bin/env python3
"""Blosc2 baseline for cairn-bench-reduce.

Usage: blosc2_baseline.py MANIFEST.json

MANIFEST describes the datasets cairn-bench-reduce wrote next to it:

    {"reps": 5, "chunk_bytes": 4194304,
     "datasets": [{"name": "heat2d",
                   "regions": [{"file": "heat2d.0.bin", "elem": 8, "bytes": 67108864}]}]}

Every region is compressed with Blosc2 as its users typically configure it for numerical
data: LZ4 codec, compression level 5 (C-Blosc2's default level), the SHUFFLE filter with
typesize = the region's element size, one thread. A region is handed to `blosc2.compress2`
in pieces of `chunk_bytes` (the way an SChunk holds a large array; a single call on a whole
64 MiB region would mostly time the page faults of a fresh 64 MiB output buffer), and
decompressed with `blosc2.decompress2` into a pre-faulted buffer.

Per dataset, `reps` timed runs of compressing all its regions and of decompressing them
(after one untimed run that also checks the round trip). Prints one JSON object on stdout.
Exits 2 with {"error": ...} when blosc2 cannot be imported, 1 when the round trip fails.
"""

import json
import os
import platform
import sys
import time


def fail(code, message):
    print(json.dumps({"error": message}))
    sys.exit(code)


try:
    import blosc2
except Exception as e:  # ImportError, or a broken binary wheel
    fail(2, f"python-blosc2 cannot be imported by {sys.executable}: {e}")


def cparams(elem):
    return blosc2.CParams(
        codec=blosc2.Codec.LZ4,
        clevel=5,
        filters=[blosc2.Filter.SHUFFLE],
        typesize=elem,
        nthreads=1,
    )


def pieces(n, chunk):
    return [(o, min(chunk, n - o)) for o in range(0, n, chunk)]


def run_dataset(ds, base, reps, chunk):
    regions = []
    for r in ds["regions"]:
        with open(os.path.join(base, r["file"]), "rb") as f:
            data = f.read()
        if len(data) != r["bytes"]:
            fail(1, f"{r['file']}: {len(data)} bytes, manifest says {r['bytes']}")
        # Pre-faulted destination for decompression.
        out = bytearray(len(data))
        out[:] = b"\x01" * len(data)
        regions.append((data, memoryview(data), out, memoryview(out), cparams(r["elem"])))
    dparams = blosc2.DParams(nthreads=1)

    def compress_all():
        return [
            [blosc2.compress2(src[o : o + n], cparams=cp) for o, n in pieces(len(data), chunk)]
            for data, src, _, _, cp in regions
        ]

    def decompress_all(stored):
        for (data, _, _, dst, _), chunks in zip(regions, stored):
            for (o, n), c in zip(pieces(len(data), chunk), chunks):
                blosc2.decompress2(c, dst=dst[o : o + n], dparams=dparams)

    # Untimed run: warm-up and round-trip check.
    stored = compress_all()
    decompress_all(stored)
    for data, _, out, _, _ in regions:
        if bytes(out) != data:
            fail(1, f"{ds['name']}: Blosc2 round trip differs")

    comp, decomp = [], []
    for _ in range(reps):
        t = time.perf_counter()
        stored = compress_all()
        comp.append(time.perf_counter() - t)
        t = time.perf_counter()
        decompress_all(stored)
        decomp.append(time.perf_counter() - t)
    raw = sum(len(data) for data, *_ in regions)
    kept = sum(len(c) for chunks in stored for c in chunks)
    return {
        "raw_bytes": raw,
        "stored_bytes": kept,
        "compress_s": comp,
        "decompress_s": decomp,
    }


def main():
    if len(sys.argv) != 2:
        fail(1, "usage: blosc2_baseline.py MANIFEST.json")
    path = sys.argv[1]
    with open(path) as f:
        manifest = json.load(f)
    base = os.path.dirname(os.path.abspath(path))
    reps = int(manifest["reps"])
    chunk = int(manifest["chunk_bytes"])
    blosc2.set_nthreads(1)
    result = {
        "python": platform.python_version(),
        "blosc2": blosc2.__version__,
        "c_blosc2": blosc2.blosclib_version.split()[0],
        "settings": "LZ4, clevel 5, SHUFFLE, typesize = element size, nthreads 1",
        "chunk_bytes": chunk,
        "datasets": {ds["name"]: run_dataset(ds, base, reps, chunk) for ds in manifest["datasets"]},
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
