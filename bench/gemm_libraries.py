#!/usr/bin/env python3
"""oneDNN, OpenBLAS, BLIS and oneMKL on E1-Bk0's GEMMs, per ISA code path and thread count (docs/blas-choice.md).

Runs bench/gemm_libraries (built with the project: build/bench/gemm_libraries) once per (library, ISA path, threads,
round), each in its own process with the library's dispatch set by environment variables, keeps each cell's best
GFLOP/s over the rounds, and prints Markdown: the machine, what code path each library reports, one table per ISA
path (GFLOP/s per library and each library's ratio to oneDNN) and the GEMM time of one training step per library.

  python3 bench/gemm_libraries.py                         # all libraries found, both paths, 1 and 2 threads, 3 rounds
  python3 bench/gemm_libraries.py --rounds 1 --libs onednn,openblas --paths avx2
  python3 bench/gemm_libraries.py --json runs/gemm.json   # also keep the raw results; --from runs/gemm.json re-renders

ISA paths (on an AVX-512 CPU the "avx2" path is each library's AVX2 code on that CPU, capped by environment
variable, not a measurement on an AVX2-only machine):
  avx512  oneDNN and oneMKL as they dispatch; OpenBLAS forced to SkylakeX (0.3.21 falls back to Prescott on CPUs it
          does not know); BLIS forced to its skx sub-config (BLIS_ARCH_TYPE=0: on a
          Zen 4 it picks zen3, an AVX2 code path, on its own)
  avx2    ONEDNN_MAX_CPU_ISA=AVX2, MKL_ENABLE_INSTRUCTIONS=AVX2, and by vendor OPENBLAS_CORETYPE=Zen and
          BLIS_ARCH_TYPE=6 (zen3) on AMD, OPENBLAS_CORETYPE=Haswell and BLIS_ARCH_TYPE=3 (haswell) on Intel
BLIS 0.9.0 reads BLIS_ARCH_TYPE as a number (arch_t: 0 skx, 3 haswell, 6 zen3): a name such as "zen3" parses as 0
and selects skx. Each run's reported code path is printed with the tables, so a cap that did not take shows.
A library that is not installed is skipped with the command that installs it. Take timings on an idle machine.
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIBS = ["onednn", "openblas", "blis", "mkl"]
LABEL = {"onednn": "oneDNN", "openblas": "OpenBLAS", "blis": "BLIS", "mkl": "oneMKL"}
INSTALL = {
    "onednn": "scripts/install-deps.sh (apt-get install libdnnl-dev)",
    "openblas": "scripts/install-deps.sh (apt-get install libopenblas-openmp-dev)",
    "blis": "scripts/install-gemm-candidates.sh --no-mkl (apt-get install libblis4-openmp)",
    "mkl": "scripts/install-gemm-candidates.sh (pip install mkl into .venv)",
}
def cpu_vendor():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("vendor_id"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


# Each library's AVX2 code path on this CPU's vendor: OpenBLAS's Zen kernels on AMD, its Haswell kernels on Intel
# (the same sgemm kernel family, each vendor's blocking); BLIS's zen3 (arch 6) or haswell (arch 3) sub-config.
AMD = cpu_vendor() == "AuthenticAMD"
PATH_ENV = {
    # OpenBLAS 0.3.21 does not know every AVX-512 CPU (an Emerald Rapids VM falls back to Prescott, SSE3): forced to
    # its SkylakeX kernels, which it picks (as Cooperlake, the same sgemm) on a Zen 4 by itself
    "avx512": {"onednn": {}, "openblas": {"OPENBLAS_CORETYPE": "SkylakeX"}, "blis": {"BLIS_ARCH_TYPE": "0"}, "mkl": {}},
    "avx2": {
        "onednn": {"ONEDNN_MAX_CPU_ISA": "AVX2"},
        "openblas": {"OPENBLAS_CORETYPE": "Zen" if AMD else "Haswell"},
        "blis": {"BLIS_ARCH_TYPE": "6" if AMD else "3"},
        "mkl": {"MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    },
}
# variables that would change a library's dispatch or threads: cleared, then each run sets its own
CLEAR = ["ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "BLIS_ARCH_TYPE",
         "BLIS_NUM_THREADS", "MKL_ENABLE_INSTRUCTIONS", "MKL_NUM_THREADS", "MKL_THREADING_LAYER", "MKL_VERBOSE",
         "ONEDNN_VERBOSE", "OMP_NUM_THREADS", "MKL_CBWR", "MKL_DEBUG_CPU_TYPE"]
LAYER_NAME = {"qkv": "q\\|k\\|v 128→384", "o": "o 128→128", "mlp_up": "MLP 128→512", "mlp_down": "MLP 512→128",
              "lm_head": "lm_head 128→65", "attn": "attention, one (b, h)"}
PRODUCT_NAME = {"fwd": "Y = X Wᵀ", "dX": "dX = dY W", "dW": "dW += dYᵀ X", "S": "S = Q Kᵀ", "O": "O = P V",
                "dP": "dP = dO Vᵀ", "dQ": "dQ = dS K", "dK": "dK = dSᵀ Q", "dV": "dV = Pᵀ dO"}


def mkl_path():
    venv = Path(os.environ.get("CANONLAB_VENV", ROOT / ".venv"))
    for name in ("libmkl_rt.so.3", "libmkl_rt.so.2", "libmkl_rt.so"):
        if (venv / "lib" / name).exists():
            return venv / "lib" / name
    return None


def run_one(binary, lib, path, threads, args, probe=False, verbose=False):
    env = {k: v for k, v in os.environ.items() if k not in CLEAR}
    env.update(PATH_ENV[path][lib])
    cmd = [str(binary), "--lib", lib, "--threads", str(threads), "--trials", str(args.trials), "--min-ms",
           str(args.min_ms), "--T", args.T, "--cases", "all" if threads == 1 else "linear"]
    if lib == "mkl":
        p = mkl_path()
        cmd += ["--path", str(p)]
        env["LD_LIBRARY_PATH"] = str(p.parent) + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        env["MKL_THREADING_LAYER"] = "GNU"
    if verbose:
        env["MKL_VERBOSE" if lib == "mkl" else "ONEDNN_VERBOSE"] = "1"
    if probe:
        cmd.append("--probe")
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    rows = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    return r.returncode, rows, r.stderr + "\n" + r.stdout


def machine():
    model, flags = "?", ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name") and model == "?":
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = line.split(":", 1)[1].strip()
    except OSError:
        pass
    fam = ""
    try:
        fam = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        fam = " ".join(l.split(":", 1)[1].strip() for l in fam.splitlines()
                       if l.split(":")[0].strip() in ("CPU family", "Model", "Hypervisor vendor"))
    except OSError:
        pass
    return {"model": model, "family_model": fam, "cpus": os.cpu_count(), "flags": flags,
            "kernel": platform.release(), "date": datetime.date.today().isoformat(),
            "loadavg_at_start": open("/proc/loadavg").read().split()[:3]}


def collect(args):
    binary = Path(args.binary)
    if not binary.exists():
        sys.exit(f"{binary} not found: build it (scripts/build.sh, or cmake --build build --target gemm_libraries)")
    libs, skipped = [], {}
    for lib in args.libs.split(","):
        if lib == "mkl" and mkl_path() is None:
            skipped[lib] = "libmkl_rt.so not found in .venv/lib"
            continue
        rc, rows, err = run_one(binary, lib, "avx512", 1, args, probe=True)
        if rc != 0:
            skipped[lib] = err.strip().splitlines()[0] if err.strip() else f"exit {rc}"
            continue
        libs.append(lib)
    for lib, why in skipped.items():
        print(f"skipping {LABEL[lib]}: {why}; install it with {INSTALL[lib]}", file=sys.stderr)
    paths = args.paths.split(",")
    threads = [int(t) for t in args.threads.split(",")]
    data = {"machine": machine(), "libs": libs, "skipped": skipped, "paths": paths, "threads": threads,
            "trials": args.trials, "min_ms": args.min_ms, "rounds": args.rounds, "info": {}, "verbose": {},
            "env": PATH_ENV, "results": []}
    for path in paths:  # what each library reports about its code path, and its verbose output's first lines
        for lib in libs:
            rc, rows, err = run_one(binary, lib, path, 1, args, probe=True, verbose=True)
            data["info"][f"{path}/{lib}"] = rows[0]["detail"] if rows else f"probe failed: {err.strip()[-200:]}"
            vlines = [l for l in err.splitlines() if "verbose" in l.lower()]
            data["verbose"][f"{path}/{lib}"] = vlines[:3]
    for rnd in range(args.rounds):
        for path in paths:
            for t in threads:
                for lib in libs:
                    rc, rows, err = run_one(binary, lib, path, t, args)
                    if rc != 0:
                        print(f"{lib} {path} {t} threads failed ({rc}): {err.strip()[-400:]}", file=sys.stderr)
                    for r in rows:
                        if r.get("info"):
                            continue
                        r["path"], r["round"] = path, rnd
                        data["results"].append(r)
                    print(f"round {rnd + 1}/{args.rounds}: {path} {LABEL[lib]} {t} thread(s) done", file=sys.stderr)
    return data


def best_cells(data):
    best = {}
    for r in data["results"]:
        key = (r["path"], r["lib"], r["threads"], r["T"], r["layer"], r["product"])
        if key not in best or r["gflops"] > best[key]["gflops"]:
            best[key] = r
    return best


def step_ms(best, path, lib, threads, T):
    """GEMM milliseconds of one training step: linear layers at `threads`; attention's pairs are split over the
    threads by our own parallel loop, so its single-threaded time is divided by the thread count."""
    lin = att = 0.0
    for (p, l, t, TT, layer, prod), r in best.items():
        if p != path or l != lib or TT != T:
            continue
        sec = r["flops"] / (r["gflops"] * 1e9)
        if r["kind"] == "linear" and t == threads:
            lin += r["per_step"] * sec
        elif r["kind"] == "attention" and t == 1:
            att += r["per_step"] * sec / threads
    return lin * 1e3, att * 1e3


def render(data):
    best = best_cells(data)
    libs = data["libs"]
    m = data["machine"]
    out = []
    out.append(f"Machine: {m['model']} ({m['family_model']}), {m['cpus']} CPUs, Linux {m['kernel']}, {m['date']}; "
               f"load average at start {' '.join(m['loadavg_at_start'])}.\n")
    out.append(f"CPU flags: `{m['flags']}`\n")
    out.append(f"Best of {data['rounds']} runs × {data['trials']} trials of >= {data['min_ms']:g} ms per cell.\n")
    if data["skipped"]:
        for lib, why in data["skipped"].items():
            out.append(f"Skipped {LABEL[lib]}: {why} (install: {INSTALL[lib]}).\n")
    out.append("| ISA path | library | environment | code path the library reports |")
    out.append("|---|---|---|---|")
    for path in data["paths"]:
        for lib in libs:
            env = " ".join(f"{k}={v}" for k, v in data["env"][path][lib].items()) or "(none)"
            out.append(f"| {path} | {LABEL[lib]} | `{env}` | {data['info'].get(f'{path}/{lib}', '?')} |")
    out.append("")
    errs = [r["max_rel_err"] for r in data["results"]]
    if errs:
        out.append(f"Every product checked against a double-precision reference: max relative error "
                   f"{max(errs):.1e} over all cells (a wrong transpose or leading dimension gives O(1)).\n")
    others = [l for l in libs if l != "onednn"]
    for path in data["paths"]:
        out.append(f"### {path} code path: GFLOP/s (higher is better)\n")
        head = "| T (rows) | layer | product | M × N × K | threads | " + " | ".join(LABEL[l] for l in libs)
        if "onednn" in libs:
            head += " | " + " | ".join(f"{LABEL[l]} / oneDNN" for l in others)
        out.append(head + " |")
        out.append("|" + "---|" * 5 + "---:|" * (len(libs) + (len(others) if "onednn" in libs else 0)))
        keys = sorted({(k[3], k[4], k[5], k[2]) for k in best if k[0] == path},
                      key=lambda k: (k[0], list(LAYER_NAME).index(k[1]), list(PRODUCT_NAME).index(k[2]), k[3]))
        for T, layer, prod, t in keys:
            rows = {l: best.get((path, l, t, T, layer, prod)) for l in libs}
            any_r = next(r for r in rows.values() if r)
            shape = f"{any_r['M']} × {any_r['N']} × {any_r['K']}"
            line = f"| {T} ({any_r['rows']}) | {LAYER_NAME[layer]} | {PRODUCT_NAME[prod]} | {shape} | {t} | "
            line += " | ".join(f"{rows[l]['gflops']:.1f}" if rows[l] else "–" for l in libs)
            if "onednn" in libs and rows["onednn"]:
                line += " | " + " | ".join(f"{rows[l]['gflops'] / rows['onednn']['gflops']:.2f}" if rows[l] else "–"
                                           for l in others)
            out.append(line + " |")
        out.append("")
    out.append("### GEMM time of one E1-Bk0 training step (ms, lower is better)\n")
    out.append("Each cell's best time × how often one step runs it (4 layers: q|k|v, o, MLP up and down, forward + dX + "
               "dW each; lm_head once; attention: 4 layers × 64 × 4 (b, h) pairs, S twice). With 2 threads the "
               "linear layers use the 2-thread GEMMs and attention the 1-thread ones, halved (our loop splits the "
               "pairs over the threads).\n")
    head = "| ISA path | T | threads | " + " | ".join(f"{LABEL[l]} (linear + attn)" for l in libs)
    if "onednn" in libs:
        head += " | " + " | ".join(f"{LABEL[l]} / oneDNN time" for l in others)
    out.append(head + " |")
    out.append("|---|---:|---:|" + "---:|" * (len(libs) + (len(others) if "onednn" in libs else 0)))
    Ts = sorted({k[3] for k in best})
    totals = {}
    for path in data["paths"]:
        for T in Ts:
            for t in data["threads"]:
                cells = []
                for l in libs:
                    lin, att = step_ms(best, path, l, t, T)
                    totals[(path, l, T, t)] = lin + att
                    cells.append(f"{lin + att:.1f} ({lin:.1f} + {att:.1f})")
                line = f"| {path} | {T} | {t} | " + " | ".join(cells)
                if "onednn" in libs:
                    base = totals[(path, "onednn", T, t)]
                    line += " | " + " | ".join(f"{totals[(path, l, T, t)] / base:.2f}" for l in others)
                out.append(line + " |")
    out.append("")
    data["totals"] = {"/".join(map(str, k)): v for k, v in totals.items()}
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=str(ROOT / "build" / "bench" / "gemm_libraries"))
    ap.add_argument("--libs", default=",".join(LIBS))
    ap.add_argument("--paths", default="avx512,avx2")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--T", default="49,255")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--trials", type=int, default=7)
    ap.add_argument("--min-ms", type=float, default=50)
    ap.add_argument("--json", help="write the raw results here")
    ap.add_argument("--from", dest="src", help="render the tables from a --json file instead of running")
    args = ap.parse_args()
    data = json.load(open(args.src)) if args.src else collect(args)
    text = render(data)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        json.dump(data, open(args.json, "w"), indent=1)
    print(text)


if __name__ == "__main__":
    main()
