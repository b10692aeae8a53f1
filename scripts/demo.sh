#!/usr/bin/env bash
# Quick start, part 1: install what is missing, build, then train two small models on the copy task and show how
# each one copies:
#   1. configs/demo-induction.yaml: RoPE, no Canon layers; it forms induction heads (high IPMR);
#   2. configs/demo.yaml: NoPE + Canon-ABCD; it copies as well, but without one.
# Each run prints its copy_acc and IPMR table; `canonlab probe` then records every head's attention on held-out
# sequences (runs/demo/*/probe/index.html), and a summary sets the two side by side, with where each model's
# most consistent head looks relative to the earlier occurrence p of the current token.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --demo
# The CLI alone: the tests, the GPU tests and the Python package are the test command's (scripts/test.sh) to build.
# Without a GPU the CLI is built without its CUDA kernels (a third of its compile time, which this machine could not
# run); scripts/build.sh without targets, which the test command runs, builds them again where nvcc is found.
if ! nvidia-smi -L >/dev/null 2>&1; then
  export CANONLAB_CMAKE_ARGS="-DCANONLAB_CUDA=OFF ${CANONLAB_CMAKE_ARGS:-}"
fi
scripts/build.sh canonlab
rm -rf runs/demo
all_heads=L0H0,L0H1,L0H2,L0H3,L1H0,L1H1,L1H2,L1H3  # both demo models have 2 layers of 4 heads
for model in induction:configs/demo-induction.yaml canon:configs/demo.yaml; do
  name=${model%%:*} config=${model#*:}
  echo "== $config"
  build/canonlab train "$config" --out "runs/demo/$name"
  build/canonlab probe "runs/demo/$name" --heads "$all_heads" --examples 16 >/dev/null
done

python3 - runs/demo/induction runs/demo/canon <<'EOF'
# The side-by-side summary, from each run's summary.json (copy_acc, IPMR at delta = 1) and probe/probe.json
# (attention of every head on 16 held-out sequences).
import collections, json, sys

def load(run):
    with open(f"{run}/summary.json") as f:
        summary = json.load(f)
    with open(f"{run}/probe/probe.json") as f:
        probe = json.load(f)
    return summary, probe

def most_consistent_head(probe):
    """The head whose attention argmax sits at one fixed offset from the earlier occurrence p of the query's
    token on the most copy queries: (head, offset, share)."""
    best = None
    for head in probe["heads"]:
        offsets, n = collections.Counter(), 0
        for ex in probe["examples"]:
            attention = ex["attention"][head]
            for q, target in ex["induction_targets"]["delta_1"]:
                row = attention[q][: q + 1]
                offsets[max(range(len(row)), key=row.__getitem__) - (target - 1)] += 1
                n += 1
        offset, hits = offsets.most_common(1)[0]
        if best is None or hits / n > best[2]:
            best = (head, offset, hits / n)
    return best

def pct(x):
    return f"{100 * x:.1f}%"

names = {"induction": "RoPE, no Canon", "canon": "NoPE + Canon-ABCD"}
rows, found = [], {}
for run in sys.argv[1:]:
    summary, probe = load(run)
    ipmr = summary["ipmr"]["delta_1"]
    top = ipmr["top_heads"][0]
    head, offset, share = most_consistent_head(probe)
    found[run.rsplit("/", 1)[-1]] = (top["rate"], head, offset, share)
    rows.append([names[run.rsplit("/", 1)[-1]], pct(summary["eval"]["copy_acc"]), pct(ipmr["global"]),
                 f"L{top['layer']}H{top['head']} {pct(top['rate'])}", f"{head}: p{offset:+d} on {pct(share)}"])
chance = summary["ipmr"]["chance_head"]

print("\n== Summary: two ways to copy (runs/demo/; held-out copy task, n_symbols 12)")
header = ["model", "copy_acc", "global IPMR", "top head IPMR", "most regular head: argmax at"]
widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
for r in [header] + rows:  # text columns left-aligned, numbers right-aligned
    cells = [c.ljust(w) if i in (0, 4) else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))]
    print(("  " + "  ".join(cells)).rstrip())
print(f"  IPMR: share of copy queries whose attention argmax is p+1, the token after the earlier occurrence p of the\n"
      f"  current token (an induction head's target; chance {pct(chance)} per head); global: some head hits.")
top_rate, head, offset, share = found["canon"]
if top_rate < 0.5 and offset != 1:
    print("  Why the Canon model copies without an induction head: its causal convolutions (kernel 4) write each\n"
          "  token into the next three positions, the job an induction circuit leaves to a previous-token head, so\n"
          "  one head can match the earlier occurrence p by content anywhere in p+1..p+3:\n"
          f"  {head} lands at p{offset:+d} on {pct(share)} of the queries, a place IPMR, which scores only p+1,"
          " does not count.")
else:
    print(f"  This run's Canon model put a head on p+1 as well ({head}, {pct(share)} of the queries): its\n"
          "  convolutions (kernel 4) make the earlier occurrence visible from p+1..p+3, and which one a head uses\n"
          "  varies with the seed.")
print("  Attention maps of every head: runs/demo/induction/probe/index.html, runs/demo/canon/probe/index.html")
print("  IPMR says where a head looks, not how it found the place; to see how the RoPE heads find it, evaluate\n"
      "  on shorter sequences: build/canonlab eval runs/demo/induction --set task.n_symbols=8\n"
      "  (configs/demo-induction.yaml says what that shows)")
EOF

# The same runs from Python: one command puts the package canonlab into .venv (a few minutes: it compiles the engine
# for Python), which the demo leaves out so that its results come first.
echo "  From Python: scripts/install-python.sh, then in .venv/bin/python: import canonlab;"
echo "  run = canonlab.Run('runs/demo/induction'); run.eval_metrics; run.model().attention(tokens)"
echo "  -- docs/python.md, docs/notebooks/quickstart.ipynb"
