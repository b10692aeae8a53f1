#!/usr/bin/env python3
"""A NumPy reader of canonlab's token shards sees exactly the windows the trainer sees.

It prepares a small corpus with `canonlab data prepare` (the King James text of Genesis 1-20 through a BPE of
512 pieces, chapters as documents, plus two files with invalid UTF-8; shards of 3000 tokens, so windows straddle
shard boundaries), then, knowing only docs/text-data.md and docs/tasks/text.md:
  - reads every shard with the documented two-line reader (numpy.fromfile for the token count, numpy.memmap at
    offset 256) and checks each header against the manifest (magic, version, width, count, tokenizer hash, vocab);
  - recomputes the offset of every training row (the documented counter-based RNG, reimplemented here) and reads
    the window train[o : o + T + 1] itself;
  - tiles the val split as documented (window k = val[kT : kT + T + 1], rows past the last window unscored);
and compares all of it with `canonlab data windows CONFIG --steps 3`, which prints the batches `canonlab train`
builds for the config. A PyTorch DataLoader over the same memmap would see the same tokens.

    python tests/torch_ref/test_text_windows.py --canonlab build/canonlab --workdir build/text_windows

Exit status 0 only if every check passed; the last line is `N passed, M failed`.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

try:
    import numpy as np
except Exception as e:  # noqa: BLE001 - any import failure means the environment is not set up
    print(f"text windows: cannot import numpy with {sys.executable}: {e!r}")
    print("create the test virtualenv with scripts/setup-venv.sh")
    print("0 passed, 1 failed")
    sys.exit(1)

MASK = (1 << 64) - 1
HEADER_BYTES = 256
HELD_OUT_STREAM = 1 << 62


# engine/rng.h: CounterRng, row_rng and below(), in 64-bit arithmetic.
def mix64(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


class CounterRng:
    def __init__(self, seed: int, stream: int):
        self.key = mix64((seed * 0x9E3779B97F4A7C15 + mix64((stream + 0x632BE59BD9B4E019) & MASK)) & MASK)
        self.counter = 0

    def next_u64(self) -> int:
        x = mix64(self.key ^ mix64((self.counter + 0xD1B54A32D192ED03) & MASK))
        self.counter += 1
        return x

    def below(self, n: int) -> int:
        limit = MASK - MASK % n
        while True:
            x = self.next_u64()
            if x < limit:
                return x % n


def row_rng(seed: int, stream: int, index: int) -> CounterRng:
    return CounterRng(seed, (stream * 0x100000001B3 + index) & MASK)


def read_split(data: str, manifest: dict, split: str, checks: list) -> np.ndarray:
    dtype = np.uint16 if manifest["dtype"] == "uint16" else np.uint32
    parts = []
    for shard in manifest["splits"][split]["shards"]:
        path = os.path.join(data, shard["file"])
        # The two-line reader of docs/text-data.md.
        n = int(np.fromfile(path, dtype="<u8", count=3)[2])
        tokens = np.memmap(path, dtype=dtype, mode="r", offset=HEADER_BYTES, shape=(n,))
        raw = np.fromfile(path, dtype=np.uint8, count=HEADER_BYTES)
        u32 = raw.view("<u4")
        u64 = raw.view("<u8")
        checks.append((f"{shard['file']} header", bytes(raw[:8]) == b"CANONTOK" and u32[2] == 1
                       and u32[3] == np.dtype(dtype).itemsize and n == shard["tokens"]
                       and f"{int(u64[3]):016x}" == manifest["tokenizer"]["xxh64"]
                       and u32[8] == manifest["tokenizer"]["vocab_size"] and not raw[36:].any()
                       and os.path.getsize(path) == HEADER_BYTES + n * np.dtype(dtype).itemsize))
        parts.append(np.asarray(tokens, dtype=np.int64))
    return np.concatenate(parts)


def kjv(first: str, last: str) -> str:
    if shutil.which("bible") is None:
        raise RuntimeError("the bible program is missing: scripts/install-deps.sh installs the Debian package bible-kjv")
    out = subprocess.run(f"bible -l 100000 {first}-{last} | sed -e 1d -e '/^[^ ]/{{n;d}}' -e 's/^  //'",
                         shell=True, check=True, capture_output=True)
    return out.stdout.decode("ascii")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--canonlab", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    corpus = os.path.join(args.workdir, "corpus")
    data = os.path.join(args.workdir, "data")
    os.makedirs(corpus)
    checks: list[tuple[str, bool]] = []
    try:
        with open(os.path.join(corpus, "genesis.txt"), "w") as f:
            f.write(kjv("Gen1:1", "Gen20:18"))
    except (RuntimeError, subprocess.CalledProcessError) as e:
        print(f"text windows: {e}")
        print("0 passed, 1 failed")
        return 1
    with open(os.path.join(corpus, "bytes1.bin"), "wb") as f:
        f.write(b"invalid \xff\xfe utf-8 \xe2\x96 and the mark \xe2\x96\x81 " * 40)
    with open(os.path.join(corpus, "bytes2.bin"), "wb") as f:
        f.write(bytes(range(256)) * 8)

    T, B, steps, seed = 64, 8, 3, 5
    prepare = [args.canonlab, "data", "prepare", "--input", corpus, "--tokenizer", "bpe:512", "--out", data,
               "--doc-delimiter", "\\n\\n", "--shard-tokens", "3000", "--val-fraction", "0.25", "--quiet"]
    r = subprocess.run(prepare, capture_output=True, text=True)
    checks.append(("data prepare", r.returncode == 0))
    if r.returncode != 0:
        print(r.stdout + r.stderr)
        print(f"0 passed, {len(checks)} failed")
        return 1
    config = os.path.join(args.workdir, "text.yaml")
    with open(config, "w") as f:
        f.write(f"task: {{name: text, context: {T}, text: {{path: {data}}}}}\n"
                f"model: {{d_model: 32, n_layers: 1, n_heads: 2}}\n"
                f"train: {{batch_size: {B}, eval_batches: 30, seed: {seed}}}\n")
    r = subprocess.run([args.canonlab, "data", "windows", config, "--steps", str(steps)], capture_output=True, text=True)
    checks.append(("data windows", r.returncode == 0))
    if r.returncode != 0:
        print(r.stdout + r.stderr)
        print(f"0 passed, {len(checks)} failed")
        return 1
    dump = json.loads(r.stdout)
    with open(os.path.join(data, "manifest.json")) as f:
        manifest = json.load(f)

    train = read_split(data, manifest, "train", checks)
    val = read_split(data, manifest, "val", checks)
    vocab = manifest["tokenizer"]["vocab_size"]
    checks.append(("splits as in the manifest", len(train) == manifest["splits"]["train"]["tokens"]
                   and len(val) == manifest["splits"]["val"]["tokens"] and len(manifest["splits"]["train"]["shards"]) > 1))
    checks.append(("tokens inside the vocabulary", int(train.max()) < vocab and int(val.max()) < vocab))
    checks.append(("<eod> ends every document", int((train == manifest["tokenizer"]["eod_id"]).sum())
                   == manifest["splits"]["train"]["documents"]))
    checks.append(("task shape", dump["vocab_size"] == vocab and dump["seq_len"] == T and dump["batch_size"] == B
                   and dump["data_seed"] == seed + 1))

    # Training rows: offset o = below(N - T) from row_rng(data_seed, step, row); window train[o : o + T + 1].
    data_seed = dump["data_seed"]
    windows_equal, offsets = True, []
    for step in range(steps):
        batch = dump["train"][step]
        for row in range(B):
            o = row_rng(data_seed, step, row).below(len(train) - T)
            offsets.append(o)
            window = train[o:o + T + 1]
            windows_equal &= batch["tokens"][row] == window[:-1].tolist() and batch["targets"][row] == window[1:].tolist()
            windows_equal &= batch["loss_mask"][row] == [1] * T
    checks.append((f"{steps * B} training windows", windows_equal))
    boundaries = np.cumsum([s["tokens"] for s in manifest["splits"]["train"]["shards"]])
    checks.append(("the offsets spread over several shards", len(set(np.searchsorted(boundaries, offsets))) > 1))

    # Held-out rows: row k = i * B + r of the eval batches is window k (rows past the last window repeat, unscored).
    W = (len(val) - 1) // T
    eval_equal, scored = len(dump["eval"]) == 30, 0
    for i, batch in enumerate(dump["eval"]):
        for row in range(B):
            k = i * B + row
            window = val[(k % W) * T:(k % W) * T + T + 1]
            mask = [1] * T if k < W else [0] * T
            scored += k < W
            eval_equal &= batch["tokens"][row] == window[:-1].tolist() and batch["targets"][row] == window[1:].tolist()
            eval_equal &= batch["score_mask"][row] == mask and batch["loss_mask"][row] == mask
    checks.append((f"{len(dump['eval']) * B} held-out windows ({W} scored once, the rest masked)",
                   eval_equal and scored == W and 30 * B > W))

    for name, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {name}")
    n_pass = sum(ok for _, ok in checks)
    print(f"\n{n_pass} passed, {len(checks) - n_pass} failed")
    return 0 if n_pass == len(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
