#!/usr/bin/env bash
# Runs every GPU test and then the GPU benchmark (bench/gpu-bench.sh) on a machine with an NVIDIA GPU, in one call of
# at most 8 minutes on an H200, and writes a results table and the logs to OUT_DIR. docs/gpu.md has the plan.
#
#   scripts/gpu-check.sh --bundle-only                 on the build machine (nvcc, our Debian libraries, no GPU):
#                                                      builds the GPU tests in build-cuda/ and packs the bundle
#   scripts/gpu-check.sh [--bundle DIR] OUT_DIR        on the GPU machine: runs the bundle's tests
#
#   --bundle DIR     the bundle (default build-cuda/gpu-bundle): canonlab_gpu_tests, canonlab_nccl_tests,
#                    canonlab_gpu_bench, wheels/ (fla's, for the benchmark), googletest/ (sources, for a rebuild),
#                    MANIFEST (what it was built from and the ldd listing)
#   --build-dir DIR  where to rebuild the tests if the bundle's binary cannot start there (default
#                    /tmp/canonlab-gpu-build): tests/gpu is a CMake project of its own that needs only nvcc, CMake
#                    and the bundled googletest
#   --seconds N      time budget for everything after the start (default 420: the 8 minutes less the machine's
#                    start, the copy and the rebuild if there is one)
#
# The tests run one suite per process, so a kernel fault (which poisons the CUDA context for the rest of the
# process) costs only its own suite; then compute-sanitizer's memcheck reruns the index-heavy suites where the
# tool works. OUT_DIR gets at most seven files, all of them at its top level:
#   results.md      the table: each suite's tests, passed, failed, skipped, seconds; the failed tests by name;
#                   the device; memcheck's and the benchmark's status
#   gpu_tests.log   every suite's full output, in order
#   device.txt      nvidia-smi's view of the GPU, the driver, nvcc, the cuBLASLt the tests loaded
#   build.log       only when the tests had to be rebuilt on that machine
#   memcheck.log    compute-sanitizer's report, when it ran
#   bench.log       the GPU benchmark (bench/gpu-bench.sh: the linear families' kernels next to fla's), when it ran
#   check.log       this script's own trace
# Exit status: 0 every test ran and passed; 1 a test failed or timed out, a test was skipped although a device
# was visible, memcheck found an error or the benchmark failed; 2 nothing could be run; 3 no CUDA device is
# visible (the test binary says so): every test reports SKIPPED, results.md is the SKIP table, nothing else ran.
# So a dry run on a machine without a GPU (CI, the build machine) ends with 3 and says why on its first lines.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bundle="$root/build-cuda/gpu-bundle" build_dir=/tmp/canonlab-gpu-build seconds=420 bundle_only=0 out=""
while (($#)); do
  case "$1" in
    --bundle) bundle="${2:?--bundle needs a directory}"; shift 2 ;;
    --build-dir) build_dir="${2:?--build-dir needs a directory}"; shift 2 ;;
    --seconds) seconds="${2:?--seconds needs a number}"; shift 2 ;;
    --bundle-only) bundle_only=1; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "error: unknown option '$1'; see scripts/gpu-check.sh --help" >&2; exit 2 ;;
    *) [[ -z "$out" ]] || { echo "error: more than one OUT_DIR ('$out', '$1')" >&2; exit 2; }; out="$1"; shift ;;
  esac
done
[[ "$seconds" =~ ^[1-9][0-9]*$ ]] || { echo "error: --seconds '$seconds': expected a whole number >= 1" >&2; exit 2; }
[[ "$bundle" = /* ]] || bundle="$PWD/$bundle"

# ---- on the build machine: build and pack ----
if ((bundle_only)); then
  set -e
  cmake -S "$root" -B "$root/build-cuda" -DCMAKE_BUILD_TYPE=Release >/dev/null
  [[ "$(cmake --build "$root/build-cuda" --target help)" == *canonlab_gpu_tests* ]] ||
    { echo "error: CMake did not enable CUDA in build-cuda (is nvcc installed?); nothing to bundle" >&2; exit 2; }
  cmake --build "$root/build-cuda" --target canonlab_gpu_tests canonlab_gpu_bench -j "$(nproc)"
  rm -rf "$bundle"
  mkdir -p "$bundle"
  cp "$root/build-cuda/tests/gpu/canonlab_gpu_tests" "$root/build-cuda/tests/gpu/canonlab_gpu_bench" "$bundle/"
  # fla's pure-Python wheels for the benchmark's side-by-side (bench/gpu-bench.sh); without a registry, no wheels
  # and the benchmark says so.
  pip=("$root/.venv/bin/python" -m pip)
  [[ -x "$root/.venv/bin/python" ]] || pip=(python3 -m pip)
  "${pip[@]}" download --no-deps -q -d "$bundle/wheels" fla-core==0.6.0 flash-linear-attention==0.6.0 einops ||
    { echo "warning: could not download fla's wheels; the GPU benchmark will time canonlab's kernels alone" >&2;
      rm -rf "$bundle/wheels"; }
  # The NCCL communicator's tests, when the toolkit has NCCL: a binary of their own (they load libnccl.so.2).
  if [[ "$(cmake --build "$root/build-cuda" --target help)" == *canonlab_nccl_tests* ]]; then
    cmake --build "$root/build-cuda" --target canonlab_nccl_tests -j "$(nproc)"
    cp "$root/build-cuda/tests/gpu/canonlab_nccl_tests" "$bundle/"
  fi
  gtest_src=/usr/src/googletest
  [[ -f "$gtest_src/CMakeLists.txt" ]] || { echo "error: $gtest_src missing: apt-get install googletest" >&2; exit 2; }
  mkdir -p "$bundle/googletest"
  (cd "$gtest_src" && tar -ch --exclude=docs --exclude=test --exclude=samples -f - .) | tar -x -C "$bundle/googletest"
  {
    echo "built:    $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
    echo "commit:   $(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "nvcc:     $(nvcc --version 2>/dev/null | tail -1)"
    echo "sha256:   $(sha256sum "$bundle/canonlab_gpu_tests" | cut -d' ' -f1)"
    echo "ldd:"
    ldd "$bundle/canonlab_gpu_tests" | sed 's/^/  /'
  } >"$bundle/MANIFEST"
  du -sh "$bundle"
  echo "bundle ready: $bundle (carry it to the GPU machine; see docs/gpu.md)"
  exit 0
fi

# ---- on the GPU machine ----
[[ -n "$out" ]] || { echo "error: no OUT_DIR given; see scripts/gpu-check.sh --help" >&2; exit 2; }
mkdir -p "$out" || exit 2
out="$(cd "$out" && pwd)"
start=$SECONDS
exec 3>&1
exec >"$out/check.log" 2>&1
say() { echo "$*"; echo "$*" >&3; }
left() { echo $((seconds - (SECONDS - start))); }
say "gpu-check: bundle $bundle, output $out, budget ${seconds}s"
[[ -f "$bundle/MANIFEST" ]] && cat "$bundle/MANIFEST"

{
  echo "== nvidia-smi"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
  else
    echo "(no nvidia-smi)"
  fi
  echo "== nvcc"
  nvcc --version 2>&1 | tail -2 || echo "(no nvcc)"
} >"$out/device.txt"

# The one library the binary does not carry: cuBLASLt of CUDA 13 (541 MB, far over what may be carried). Every
# CUDA 13 toolkit has it, and so does PyTorch's nvidia-cublas wheel.
find_cublaslt() {
  local d
  for d in ${CUDA_HOME:+"$CUDA_HOME/lib64"} /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
           /usr/lib/x86_64-linux-gnu; do
    [[ -e "$d/libcublasLt.so.13" ]] && { echo "$d"; return 0; }
  done
  if command -v python3 >/dev/null; then
    python3 - <<'EOF' 2>/dev/null && return 0
import glob, os, site, sys
dirs = site.getsitepackages() + [site.getusersitepackages()] + sys.path
for d in dirs:
    for f in glob.glob(os.path.join(d, "nvidia", "**", "libcublasLt.so.13"), recursive=True):
        print(os.path.dirname(f)); sys.exit(0)
sys.exit(1)
EOF
  fi
  return 1
}

bin="$bundle/canonlab_gpu_tests"
bench_bin="$bundle/canonlab_gpu_bench"
starts() { [[ -x "$1" ]] && "$1" --gtest_list_tests >/dev/null 2>&1; }
if [[ -x "$bin" ]] && ! starts "$bin"; then
  if dir="$(find_cublaslt)"; then
    export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    say "libcublasLt.so.13 from $dir"
  fi
fi
if ! starts "$bin"; then
  say "the bundle's binary does not start here ($(ldd "$bin" 2>&1 | grep -m1 'not found' || echo "see check.log")); rebuilding"
  ldd "$bin" 2>&1 || true
  if command -v nvcc >/dev/null && command -v cmake >/dev/null && [[ -f "$bundle/googletest/CMakeLists.txt" ]]; then
    gen=()
    command -v ninja >/dev/null && gen=(-G Ninja)
    if timeout "$(left)" cmake -S "$root/tests/gpu" -B "$build_dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
         -DCANONLAB_GTEST_SOURCE="$bundle/googletest" >"$out/build.log" 2>&1 &&
       timeout "$(left)" cmake --build "$build_dir" --target canonlab_gpu_tests canonlab_gpu_bench -j "$(nproc)" \
         >>"$out/build.log" 2>&1; then
      bin="$build_dir/canonlab_gpu_tests"
      bench_bin="$build_dir/canonlab_gpu_bench"
      dir="$(find_cublaslt)" && export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
  fi
  starts "$bin" || { say "error: no runnable GPU test binary (see build.log and check.log)"; exit 2; }
fi
say "tests: $bin"
{
  echo "== cuBLASLt the tests load"
  ldd "$bin" 2>&1 | grep cublasLt
} >>"$out/device.txt"

# ---- the tests, one suite per process ----
suites=()
while IFS= read -r line; do
  [[ "$line" =~ ^([^[:space:]#][^[:space:]]*)\.(\ .*)?$ ]] && suites+=("${BASH_REMATCH[1]}")
done < <("$bin" --gtest_list_tests)
say "${#suites[@]} suites"
# Is there a device? The tests' own check (cudaGetDeviceCount, gpu_test.h) decides, through one tiny test.
no_gpu=0 no_gpu_reason=""
probe="$("$bin" --gtest_filter='GpuCanonLimits.*' 2>&1)"
gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')"
if grep -q 'no CUDA device' <<<"$probe"; then
  no_gpu_reason="$(grep -m1 -o 'no CUDA device.*' <<<"$probe")"
  if ((${gpus:-0} > 0)); then
    # nvidia-smi sees a GPU the CUDA runtime cannot use (e.g. a driver older than CUDA 13 needs): a failure, not
    # the no-GPU dry run
    say "error: nvidia-smi lists ${gpus} GPU(s) but the tests say: $no_gpu_reason (driver too old for CUDA 13?)"
    no_gpu_reason=""
  else
    no_gpu=1
    say "NO GPU: $no_gpu_reason"
    say "every test will report SKIPPED; no memcheck, no benchmark; exit status 3"
  fi
fi
results="$out/.suites" && mkdir -p "$results"
: >"$out/gpu_tests.log"
status=0
for s in "${suites[@]}"; do
  budget=$(left)
  safe="${s//\//_}"
  if ((budget <= 5)); then
    say "out of time before $s"
    echo "$s|124|0|not run: out of time" >>"$results/runs"
    status=1
    continue
  fi
  t0=$SECONDS
  timeout "$budget" "$bin" --gtest_filter="$s.*" --gtest_output="xml:$results/$safe.xml" >"$results/$safe.log" 2>&1
  rc=$?
  cat "$results/$safe.log" >>"$out/gpu_tests.log"
  note=""
  ((rc == 124)) && note="timed out"
  ((rc != 0 && rc != 124)) && note="exit status $rc"
  ((rc != 0)) && status=1
  echo "$s|$rc|$((SECONDS - t0))|$note" >>"$results/runs"
done

# ---- the NCCL communicator (tests/gpu/nccl/): libnccl.so.2 from the toolkit or PyTorch's nvidia-nccl wheel ----
nccl_status="not run: no canonlab_nccl_tests in the bundle"
if [[ -x "$bundle/canonlab_nccl_tests" ]]; then
  nccl_dir="$(python3 -c 'import glob,os,site,sys
for d in ["/usr/local/cuda/lib64", "/usr/local/cuda/lib"] + site.getsitepackages() + sys.path:
    for f in glob.glob(os.path.join(d, "**", "libnccl.so.2"), recursive=True):
        print(os.path.dirname(f)); sys.exit(0)' 2>/dev/null || true)"
  LD_LIBRARY_PATH="${nccl_dir:+$nccl_dir:}${LD_LIBRARY_PATH:-}" timeout "$(left)" "$bundle/canonlab_nccl_tests" \
    >"$out/nccl_tests.log" 2>&1
  rc=$?
  cat "$out/nccl_tests.log" >>"$out/gpu_tests.log"
  if ((rc == 0)); then nccl_status="passed ($(grep -c '^\[       OK \]' "$out/nccl_tests.log") ok, $(grep -c '^\[  SKIPPED \]' "$out/nccl_tests.log") skipped; libnccl from ${nccl_dir:-the loader path})"
  else nccl_status="FAILED (exit $rc): see nccl_tests.log"; status=1; fi
fi
say "NCCL communicator: $nccl_status"

# ---- out-of-bounds accesses: compute-sanitizer's memcheck over the index-heavy suites, if the tool works here ----
# (it does on Firecracker machines, not on gVisor ones: docs/gpu.md). Advisory in time, binding in result.
memcheck_status="not run: no compute-sanitizer"
sanitizer="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)"
if ((no_gpu)); then
  memcheck_status="not run: no CUDA device"
elif [[ -n "$sanitizer" ]] && ((${gpus:-0} == 0)); then
  memcheck_status="not run: no GPU visible"
elif [[ -n "$sanitizer" ]]; then
  budget=$(( $(left) - 60 ))
  ((budget > 150)) && budget=150
  if ((budget >= 30)); then
    timeout "$budget" "$sanitizer" --tool memcheck --error-exitcode 99 "$bin" \
      --gtest_filter='Shapes/GpuAttention.*:Shapes/GpuCanon.*:Shapes/GpuNorm.*:GpuLookup.*:GpuElementwise.*:Shapes/GpuSsd.*:Shapes/GpuGla.*:Shapes/GpuDeltaRule.*:GpuLinearGlue.*:GpuDecode.*' \
      >"$out/memcheck.log" 2>&1
    rc=$?
    if ((rc == 0)); then memcheck_status="clean (attention, canon, norm, lookup, elementwise, ssd, gla, delta-rule, linear glue, decode suites)"
    elif ((rc == 99)); then memcheck_status="ERRORS: see memcheck.log"; status=1
    elif ((rc == 124)); then memcheck_status="stopped after ${budget}s without an error so far (memcheck.log)"
    elif grep -q "not supported" "$out/memcheck.log"; then memcheck_status="unavailable on this machine (memcheck.log)"
    else memcheck_status="exit status $rc: see memcheck.log (a test failure under memcheck counts as above)"
    fi
  else
    memcheck_status="not run: out of time"
  fi
fi

# ---- the GPU benchmark: bench/gpu-bench.sh OUT_DIR (time budget in CANONLAB_GPU_SECONDS; its output is bench.log) ----
bench_status="not run: no bench/gpu-bench.sh"
if ((no_gpu)); then
  bench_status="not run: no CUDA device"
elif [[ -x "$root/bench/gpu-bench.sh" ]]; then
  budget=$(left)
  if ((budget > 30)); then
    CANONLAB_GPU_BUNDLE="$bundle" CANONLAB_GPU_BENCH_BIN="$bench_bin" CANONLAB_GPU_SECONDS=$((budget - 10)) \
      timeout "$budget" "$root/bench/gpu-bench.sh" "$out" >"$out/bench.log" 2>&1
    rc=$?
    bench_status=$([[ $rc == 0 ]] && echo "ran: see bench.log" || echo "failed (exit status $rc): see bench.log")
    ((rc != 0)) && status=1
  else
    bench_status="not run: out of time"
  fi
fi

# ---- the table ----
python3 - "$results" "$out/results.md" "$bench_status" "$out/device.txt" "$memcheck_status" "$no_gpu_reason" <<'EOF'
import glob, os, sys, xml.etree.ElementTree as ET
results, path, bench, device, memcheck, no_gpu = sys.argv[1:7]
runs = {}
if os.path.exists(os.path.join(results, "runs")):
    for line in open(os.path.join(results, "runs")):
        name, rc, secs, note = line.rstrip("\n").split("|", 3)
        runs[name] = (int(rc), int(secs), note)
rows, failed_tests, totals = [], [], [0, 0, 0, 0]
for name, (rc, secs, note) in runs.items():
    xml = os.path.join(results, name.replace("/", "_") + ".xml")
    n = passed = failed = skipped = 0
    if os.path.exists(xml):
        for case in ET.parse(xml).getroot().iter("testcase"):
            n += 1
            if case.find("failure") is not None:
                failed += 1
                failed_tests.append(f"{case.get('classname')}.{case.get('name')}")
            elif case.get("result") == "skipped" or case.find("skipped") is not None:
                skipped += 1
            else:
                passed += 1
    elif not note:
        note = "no XML report"
    if rc != 0 and failed == 0:
        failed_tests.append(f"{name}.* ({note})")
    rows.append((name, n, passed, failed, skipped, secs, note))
    for i, v in enumerate((n, passed, failed, skipped)):
        totals[i] += v
with open(path, "w") as f:
    f.write("# GPU check\n\n")
    if no_gpu:
        f.write(f"**NO GPU: {no_gpu}.** Every test was SKIPPED; nothing was verified.\n\n")
    dev = open(device).read().strip() if os.path.exists(device) else "(unknown)"
    f.write("```\n" + dev + "\n```\n\n")
    f.write("| suite | tests | passed | failed | skipped | s | note |\n|---|---:|---:|---:|---:|---:|---|\n")
    for r in rows:
        f.write("| " + " | ".join(str(x) for x in r) + " |\n")
    f.write(f"| **all** | {totals[0]} | {totals[1]} | {totals[2]} | {totals[3]} | | |\n\n")
    if failed_tests:
        f.write("Failed:\n\n" + "".join(f"- `{t}`\n" for t in failed_tests) + "\n")
    if totals[3] and not no_gpu:
        f.write(f"{totals[3]} tests skipped: on a GPU machine that means no device was visible (see gpu_tests.log).\n\n")
    f.write(f"compute-sanitizer memcheck: {memcheck}\n\n")
    f.write(f"Benchmark: {bench}\n")
print(f"{totals[0]} tests: {totals[1]} passed, {totals[2]} failed, {totals[3]} skipped")
sys.exit(1 if totals[2] else 3 if totals[3] else 0)
EOF
rc=$?
# the table's own verdict: 0 all passed, 1 a failure, 3 no failure but skips; anything else: it was not written
if ((rc == 1)); then
  ((status == 0)) && status=1
elif ((rc == 3)); then
  # skips are the expected outcome without a device, and a failure with one
  if ((no_gpu)); then ((status == 0)) && status=3; else ((status == 0)) && status=1; fi
elif ((rc != 0)); then
  say "error: could not write results.md (python3 exit status $rc)"
  status=2
fi
rm -rf "$results"
[[ -f "$out/results.md" ]] && say "$(grep '^| \*\*all' "$out/results.md")"
say "gpu-check: done in $((SECONDS - start))s, exit status $status; results in $out/results.md"
exit $status
