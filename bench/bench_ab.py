#!/usr/bin/env python3
"""Step time of two canonlab binaries on the same configs, interleaved (A, B, A, B, ...), for before/after tables
of a change that must not slow training down (BENCHMARKS.md, "Backend seam"). Each measurement is one
`canonlab bench-step CONFIG --steps S --warmup W --threads P` (itself the median of S steps); the table gives the
median over the rounds for each binary and their ratio. Interleaving puts both binaries under the same load when
the machine is shared.

    python3 bench/bench_ab.py --a OLD/canonlab --b NEW/canonlab --rounds 7 --threads 1 \\
        configs/E1-Bk0.yaml configs/linear/gla-4L128-canon-AbCD.yaml ...

A config may carry --set overrides after a '#', comma-separated: "configs/E1-Bk0.yaml#train.precision=bf16,task.n_symbols=8".
Run from the checkout whose configs/ the paths name.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys


def bench_step(binary: str, spec: str, args) -> float:
    config, _, sets = spec.partition("#")
    cmd = [binary, "bench-step", config, "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--threads", str(args.threads)]
    for s in filter(None, sets.split(",")):
        cmd += ["--set", s]
    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {p.returncode}: {(p.stderr or p.stdout).strip()[:300]}")
    return float(json.loads(p.stdout.strip().splitlines()[-1])["ms_per_step"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="the binary before the change")
    ap.add_argument("--b", required=True, help="the binary after the change")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("configs", nargs="+")
    args = ap.parse_args()
    times = {spec: {"a": [], "b": []} for spec in args.configs}
    for r in range(args.rounds):
        for spec in args.configs:
            order = ("a", "b") if r % 2 == 0 else ("b", "a")  # alternate who goes first
            for who in order:
                times[spec][who].append(bench_step(getattr(args, who), spec, args))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    print(f"| config | before (ms/step) | after (ms/step) | after / before |")
    print(f"|---|---:|---:|---:|")
    for spec, t in times.items():
        a, b = statistics.median(t["a"]), statistics.median(t["b"])
        print(f"| `{spec}` | {a:.2f} | {b:.2f} | {b / a:.3f} |")
    print(f"\n{args.rounds} rounds, bench-step --steps {args.steps} --warmup {args.warmup} --threads {args.threads}; "
          f"medians over the rounds; all measurements (ms): " +
          json.dumps({s: t for s, t in times.items()}))


if __name__ == "__main__":
    main()
