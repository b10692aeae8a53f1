#!/usr/bin/env python3
"""fla 0.6.0's chunk kernels at the shapes of bench_linear_layers.cpp (issue 27), for the side-by-side table that
bench/gpu-bench.sh prints on the GPU machine: chunk_gla (GLA), chunk_gated_delta_rule (Gated DeltaNet) and
chunk_simple_gla (a scalar decay per head: the SSD's mathematics with q = C, k = B, v = dt x, g = dt A; mamba_ssm
itself is not a pure-Python wheel and cannot be carried). Per kernel and dtype: the first forward + backward (which
includes Triton's autotuning and compilation) timed alone, then the median of --reps forward and backward passes
(device events), and whether two backward passes gave the same bits. Random inputs, never zeros."""
import argparse
import time

import torch


def timed(fn):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    result = fn()
    stop.record()
    torch.cuda.synchronize()
    return result, start.elapsed_time(stop)


def bench(name, shape, make_inputs, call, reps, dtype, tokens):
    torch.manual_seed(0)
    leaves = make_inputs(dtype)

    def forward():
        for x in leaves:
            x.grad = None
        return call(*leaves)[0]

    t0 = time.perf_counter()
    out = forward()
    dout = torch.randn_like(out)
    out.backward(dout)
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    reference = [x.grad.clone() for x in leaves]
    fwd, bwd, same = [], [], True
    for _ in range(reps):
        out, f = timed(forward)
        _, b = timed(lambda: out.backward(dout))
        fwd.append(f)
        bwd.append(b)
        same = same and all(torch.equal(x.grad, r) for x, r in zip(leaves, reference))
    f, b = sorted(fwd)[len(fwd) // 2], sorted(bwd)[len(bwd) // 2]
    print(f"| fla {name} ({str(dtype).replace('torch.', '')}) | {shape} | {f:.2f} | {b:.2f} | "
          f"{tokens / ((f + b) / 1e3):.3g} | {'yes' if same else 'NO'} | {first:.1f} |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--small", action="store_true", help="only B 2, T 256 (default: B 2, T 256 first, whose "
                        "first calls do Triton's autotuning for both sizes, then B 16, T 2048)")
    parser.add_argument("--seconds", type=float, default=300)
    args = parser.parse_args()
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    from fla.ops.gla import chunk_gla
    from fla.ops.simple_gla import chunk_simple_gla

    import fla
    dev = "cuda"
    print(f"fla {getattr(fla, '__version__', '?')}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print("\n| kernel | shape | forward ms | backward ms | fwd+bwd tokens/s | same bits twice | first call s |")
    print("|---|---|---:|---:|---:|---|---:|")
    start = time.perf_counter()

    sizes = [(2, 256)] if args.small else [(2, 256), (16, 2048)]
    for B, T in sizes:
        if not run_size(B, T, args, start, dev, chunk_gla, chunk_gated_delta_rule, chunk_simple_gla):
            return
    print(f"({args.reps} timed repetitions each, median; {time.perf_counter() - start:.0f} s in all)")


def run_size(B, T, args, start, dev, chunk_gla, chunk_gated_delta_rule, chunk_simple_gla):
    """One size's rows; False when the time budget is spent."""
    def gla_inputs(dtype, H=6, K=128, V=256):
        q, k = (torch.rand(B, T, H, K, device=dev) * 2 - 1 for _ in range(2))
        v = torch.rand(B, T, H, V, device=dev) * 2 - 1
        g = -0.01 - 0.29 * torch.rand(B, T, H, K, device=dev)
        return [x.to(dtype).requires_grad_() for x in (q, k, v, g)]

    def gdn_inputs(dtype, H=6, K=128, V=256):
        q, k = (torch.nn.functional.normalize(torch.rand(B, T, H, K, device=dev) * 2 - 1, dim=-1) for _ in range(2))
        v = torch.rand(B, T, H, V, device=dev) * 2 - 1
        g = -0.001 - 0.299 * torch.rand(B, T, H, device=dev)
        beta = 0.05 + 0.9 * torch.rand(B, T, H, device=dev)
        return [x.to(dtype).requires_grad_() for x in (q, k, v, g, beta)]

    def ssd_inputs(dtype, H=24, N=128, P=64):
        C, Bm = (torch.rand(B, T, 1, N, device=dev).expand(B, T, H, N) * 2 - 1 for _ in range(2))
        dt = 0.001 + 0.099 * torch.rand(B, T, H, device=dev)
        x = torch.rand(B, T, H, P, device=dev) * 2 - 1
        A = -1 - 7 * torch.rand(H, device=dev)
        return [t.contiguous().to(dtype).requires_grad_() for t in (C, Bm, x * dt[..., None], dt * A)]

    shape = f"B{B} T{T} H6 K128 V256"
    runs = [
        ("chunk_gla", shape, gla_inputs, lambda q, k, v, g: chunk_gla(q, k, v, g)),
        ("chunk_gated_delta_rule", shape, gdn_inputs,
         lambda q, k, v, g, beta: chunk_gated_delta_rule(q, k, v, g, beta)),
        ("chunk_simple_gla (SSD)", f"B{B} T{T} H24 P64 N128", ssd_inputs,
         lambda q, k, v, g: chunk_simple_gla(q, k, v, g, scale=1.0)),
    ]
    for dtype in (torch.float32, torch.bfloat16):
        for name, shp, make, call in runs:
            if time.perf_counter() - start > args.seconds:
                print(f"(stopped: {args.seconds:.0f} s budget spent)")
                return False
            try:
                bench(name, shp, make, call, args.reps, dtype, B * T)
            except Exception as e:  # one kernel's failure (e.g. a dtype it rejects) must not hide the others
                print(f"| fla {name} ({str(dtype).replace('torch.', '')}) | {shp} | failed: {type(e).__name__}: "
                      f"{str(e)[:120]} | | | | |", flush=True)
    return True


if __name__ == "__main__":
    main()
