#!/usr/bin/env python3
"""Compile time per translation unit: every unit of the named targets, compiled alone with the build's own command
(from BUILD/compile_commands.json, output to a scratch folder), `jobs` at a time under `nice`; prints the units by
time and the CPU seconds per target. What BENCHMARKS.md "The quick-start demo and build time" reports.

    python3 bench/bench_build_units.py --build build --targets canonlab_core canonlab canonlab_cuda --jobs 2
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor


def target_of(command: str) -> str:
    m = re.search(r"CMakeFiles/([^/ ]+)\.dir/", command)
    return m.group(1) if m else "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--targets", nargs="+", default=["canonlab_core", "canonlab"])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args()
    with open(os.path.join(a.build, "compile_commands.json")) as f:
        units = [u for u in json.load(f) if target_of(u["command"]) in a.targets]
    scratch = tempfile.mkdtemp(prefix="canonlab-units-")

    def compile_one(i_unit):
        i, u = i_unit
        command = re.sub(r" -o \S+", f" -o {scratch}/{i}.o", u["command"])
        start = time.monotonic()
        p = subprocess.run("nice " + command, shell=True, cwd=u["directory"], capture_output=True)
        return time.monotonic() - start, u["file"], target_of(u["command"]), p.returncode

    with ThreadPoolExecutor(a.jobs) as ex:
        results = sorted(ex.map(compile_one, enumerate(units)), reverse=True)
    per_target = collections.defaultdict(lambda: [0, 0.0])
    for seconds, _, target, _ in results:
        per_target[target][0] += 1
        per_target[target][1] += seconds
    print(f"{len(results)} units, {a.jobs} at a time")
    for seconds, path, target, rc in results[: a.top]:
        print(f"{seconds:7.1f} s  {target:16s} {os.path.relpath(path)}" + ("" if rc == 0 else f"  (exit {rc})"))
    for target, (n, seconds) in sorted(per_target.items()):
        print(f"{target}: {n} units, {seconds:.0f} CPU s")


if __name__ == "__main__":
    main()
