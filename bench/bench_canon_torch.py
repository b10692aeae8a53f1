#!/usr/bin/env python3
"""PyTorch's Canon layer on the CPU, the peer of bench/bench_canon_fused (same shapes, same JSON fields): causal
depthwise conv1d over (B, T, C) as tests/torch_ref/canon_model.py writes it (transpose, conv1d with K-1 padding,
slice, transpose back), then [silu, layer_norm], then the residual add; forward, and backward (autograd, the
gradient of sum(out * r) with respect to the input, the conv weight and the norm's parameters). Median ms over
--rounds rounds, each the mean of --reps calls.

    /work/main/.venv/bin/python bench/bench_canon_torch.py [--rounds 7] [--reps 3] [--threads 1,2]
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F


def canon(h, weight, ln_w, ln_b, act_norm, K):
    T = h.shape[1]
    y = F.conv1d(h.transpose(1, 2), weight, padding=K - 1, groups=h.shape[2])[:, :, :T].transpose(1, 2)
    if act_norm:
        y = F.silu(y)
        y = F.layer_norm(y, (h.shape[2],), ln_w, ln_b, 1e-5)
    return h + y


def median_ms(fn, rounds, reps):
    fn()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        times.append((time.perf_counter() - t0) * 1e3 / reps)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--T", default="128,512")
    ap.add_argument("--C", default="64,128,512")
    a = ap.parse_args()
    B, K = 32, 4
    for name, act_norm in (("none,none,residual", False), ("silu,layernorm,residual", True)):
        for T in map(int, a.T.split(",")):
            for C in map(int, a.C.split(",")):
                for th in map(int, a.threads.split(",")):
                    torch.set_num_threads(th)
                    g = torch.Generator().manual_seed(0)
                    h = (torch.rand(B, T, C, generator=g) * 2 - 1).requires_grad_(True)
                    w = (torch.rand(C, 1, K, generator=g) * 2 - 1).requires_grad_(True)
                    ln_w = torch.ones(C, requires_grad=True)
                    ln_b = torch.zeros(C, requires_grad=True)
                    r = torch.rand(B, T, C, generator=g) * 2 - 1

                    def fwd():
                        with torch.no_grad():
                            canon(h, w, ln_w, ln_b, act_norm, K)

                    def fwd_bwd():
                        out = canon(h, w, ln_w, ln_b, act_norm, K)
                        out.backward(r)

                    f = median_ms(fwd, a.rounds, a.reps)
                    fb = median_ms(fwd_bwd, a.rounds, a.reps)
                    for d, ms in (("forward", f), ("backward", fb - f)):
                        print(json.dumps({"epilogue": name, "B": B, "T": T, "C": C, "K": K, "threads": th,
                                          "dir": d, "torch_ms": round(ms, 3),
                                          "note": "backward = (forward with autograd + backward) - no-grad forward"}),
                              flush=True)


if __name__ == "__main__":
    main()
