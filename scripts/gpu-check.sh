#!/usr/bin/env bash
# Verifies canonlab on a machine with an NVIDIA GPU in one call of at most 8 minutes: the GPU kernel tests, then
# training through the bundled `canonlab` CLI on the GPU (against the CPU, twice, killed and resumed, every linear
# family, the 75M text model in bf16, packed sweeps), then the GPU benchmark. docs/gpu.md has the plan.
#
#   scripts/gpu-check.sh --bundle-only                 on the build machine (nvcc, our Debian libraries, no GPU):
#                                                      builds build-cuda/, packs the bundle and checks that it runs
#   scripts/gpu-check.sh [--bundle DIR] OUT_DIR        on the GPU machine: every check, OUT_DIR/summary.md
#
#   --bundle DIR     the bundle (default build-cuda/gpu-bundle): the executables canonlab, canonlab_gpu_tests,
#                    canonlab_gpu_bench, canonlab_nccl_tests (RUNPATH $ORIGIN/lib); lib/ (or lib.tar.xz) with every
#                    library they need but glibc and the driver; configs/, data/kjv-bpe4096 (text for the 75M run),
#                    tests/torch_ref/, bench/gpu/ (the benchmark's scripts and configs), wheels/ (fla's),
#                    googletest/ (sources, for a rebuild), MANIFEST (commit, nvcc, sha256s, the ldd listing)
#   --build-dir DIR  where to rebuild the kernel tests if the bundle's binary cannot start there (default
#                    /tmp/canonlab-gpu-build): tests/gpu is a CMake project of its own that needs only nvcc, CMake
#                    and the bundled googletest. The CLI cannot be rebuilt there (it needs our Debian libraries).
#   --seconds N      time budget for everything after the start (default 420: the 8 minutes less the machine's
#                    start and the copy). Checks run most valuable first; what the budget cannot reach is SKIPPED
#                    with "not run: out of time".
#   --train-device D the device of the training checks (default cuda). `--train-device cpu --quick` runs the
#                    training checks' plumbing (runs, kills, comparisons) on a machine without a GPU: a dry run of
#                    the script, not a verification (every comparison is then the CPU against itself)
#   --quick          the training checks with a few steps and a tiny text model (for --train-device cpu)
#
# OUT_DIR, all at its top level:
#   summary.md      one line per check: | check | status | measured | note |, status PASS, FAIL or SKIPPED (why)
#   <check>.log     each check's commands and output (kernel-tests.log, e1-bk0.log, ..., bench.log)
#   results.md      the kernel tests in detail: per suite tests, passed, failed, skipped, seconds; failed tests
#   device.txt      nvidia-smi's view of the GPU, the driver, nvcc, the cuBLASLt the tests loaded
#   runs/           summary.json and metrics.jsonl of every training run (the run directories stay in /tmp)
#   check.log       this script's own trace; build.log, memcheck.log, bench_step.md when those happened
# Exit status: 0 every check passed; 1 a check failed, timed out or was not reached in time; 2 nothing could be run
# (or --bundle-only failed); 3 no CUDA device is visible: every check reports SKIPPED and says why (the kernel tests
# still list as SKIPPED, in milliseconds). So a dry run on a machine without a GPU (CI, the build machine) ends
# with 3 and says why on its first lines.
set -uo pipefail
export LC_ALL=C  # decimal points in the times, whatever the machine's locale
root="$(cd "$(dirname "$0")/.." && pwd)"
bundle="$root/build-cuda/gpu-bundle" build_dir=/tmp/canonlab-gpu-build seconds=420 bundle_only=0 out=""
dev=cuda quick=0
while (($#)); do
  case "$1" in
    --bundle) bundle="${2:?--bundle needs a directory}"; shift 2 ;;
    --build-dir) build_dir="${2:?--build-dir needs a directory}"; shift 2 ;;
    --seconds) seconds="${2:?--seconds needs a number}"; shift 2 ;;
    --train-device) dev="${2:?--train-device needs cuda or cpu}"; shift 2 ;;
    --quick) quick=1; shift ;;
    --bundle-only) bundle_only=1; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "error: unknown option '$1'; see scripts/gpu-check.sh --help" >&2; exit 2 ;;
    *) [[ -z "$out" ]] || { echo "error: more than one OUT_DIR ('$out', '$1')" >&2; exit 2; }; out="$1"; shift ;;
  esac
done
[[ "$seconds" =~ ^[1-9][0-9]*$ ]] || { echo "error: --seconds '$seconds': expected a whole number >= 1" >&2; exit 2; }
[[ "$dev" == cuda || "$dev" == cpu ]] || { echo "error: --train-device '$dev': allowed: cuda, cpu" >&2; exit 2; }
[[ "$bundle" = /* ]] || bundle="$PWD/$bundle"
executables=(canonlab canonlab_gpu_tests canonlab_cuda_backend_tests canonlab_gpu_bench canonlab_nccl_tests)
limit_bytes=$((64 << 20))  # what the device tool carries

# Libraries a Linux machine has of its own (glibc, the loader) or with its NVIDIA driver: never bundled.
system_lib() { [[ "$1" =~ ^(linux-vdso\.so|libc\.so|libm\.so|libmvec\.so|libpthread\.so|libdl\.so|librt\.so|libresolv\.so|libutil\.so|ld-linux-x86-64\.so|libcuda\.so|libnvidia-) ]]; }

# The bundle as it runs, in $run: the bundle itself when lib/ is unpacked; else a temporary directory with
# lib.tar.xz unpacked and the executables copied beside it (their RUNPATH, $ORIGIN/lib, wants lib/ next to them).
unpack_bundle() {
  run="$bundle"
  [[ -d "$bundle/lib" || ! -f "$bundle/lib.tar.xz" ]] && return 0
  run="$(mktemp -d /tmp/canonlab-bundle.XXXXXX)" || return 1
  tar -xJf "$bundle/lib.tar.xz" -C "$run" || return 1
  local exe
  for exe in "${executables[@]}"; do [[ -f "$bundle/$exe" ]] && cp -p "$bundle/$exe" "$run/"; done
  return 0
}

# ldd of every executable in DIR with LD_LIBRARY_PATH unset, each line marked: "bundled" (in DIR/lib), "system"
# (glibc, the loader, the driver: libcuda.so.1 is "not found" where there is no driver), "GPU machine's" (libnccl.so.2
# and what it needs, for canonlab_nccl_tests only: 218 MB, from the toolkit or PyTorch's wheel there) or "OUTSIDE".
# Returns 1 when a line is OUTSIDE.
check_ldd() {
  local dir=$1 exe line name arrow path mark bad=0 nccl_deps=""
  local lib_real
  lib_real="$(realpath "$dir/lib")"
  for exe in "${executables[@]}"; do
    [[ -x "$dir/$exe" ]] || continue
    echo "ldd $exe:"
    if [[ $exe == canonlab_nccl_tests ]]; then
      nccl_deps="$(env -u LD_LIBRARY_PATH ldd "$dir/$exe" | awk '$1 == "libnccl.so.2" && $3 ~ /^\// { print $3 }' |
                   xargs -r ldd 2>/dev/null | awk '{ print $1 }' | tr '\n' ' ')"
    fi
    while read -r line; do
      read -r name arrow path _ <<<"$line"
      [[ "$arrow" == "=>" ]] || path="$name"  # linux-vdso and the loader: no arrow
      if system_lib "$(basename "$name")"; then mark="system"
      elif [[ $exe == canonlab_nccl_tests && ( $name == libnccl.so.2 || " $nccl_deps " == *" $name "* ) ]]; then
        mark="GPU machine's"
      elif [[ "$path" == /* && "$(realpath "$path")" == "$lib_real"/* ]]; then mark="bundled"
      else mark="OUTSIDE"; bad=1
      fi
      printf '  %-14s %s\n' "$mark" "$line"
    done < <(env -u LD_LIBRARY_PATH ldd "$dir/$exe" 2>&1)
  done
  return $bad
}

# ---- on the build machine: build, pack, check ----
if ((bundle_only)); then
  set -e
  command -v patchelf >/dev/null || { echo "error: patchelf missing: apt-get install patchelf (scripts/install-deps.sh)" >&2; exit 2; }
  # The GPU machine's processor is unknown: AVX2 as the baseline, never -march=native. No MPI: the GPU machine
  # trains one process per GPU, and libmpi would bring Open MPI's plugins and hwloc into the bundle.
  # cuDNN's fused attention (train.attention_kernel, docs/gpu.md#attention-kernels) compiles against the header-only
  # cuDNN frontend, a build dependency of this build only: its wheel, unpacked into build-cuda/cudnn-frontend.
  # libcudnn.so.9 itself is opened at run time on the GPU machine (PyTorch's nvidia-cudnn-cu13 wheel), not bundled.
  fe_dir="$root/build-cuda/cudnn-frontend"
  if [[ ! -f "$fe_dir/include/cudnn_frontend.h" ]]; then
    mkdir -p "$fe_dir"
    fe_py="$root/.venv/bin/python"
    [[ -x "$fe_py" ]] || fe_py=python3
    if "$fe_py" -m pip download --no-deps -q -d "$fe_dir/wheel" nvidia-cudnn-frontend==1.32.0 &&
       "$fe_py" -m zipfile -e "$fe_dir"/wheel/nvidia_cudnn_frontend-*.whl "$fe_dir/unpacked"; then
      cp -r "$(dirname "$(find "$fe_dir/unpacked" -name cudnn_frontend.h | head -1)")" "$fe_dir/include"
    fi
    [[ -f "$fe_dir/include/cudnn_frontend.h" ]] ||
      echo "warning: no cuDNN frontend (pip download nvidia-cudnn-frontend failed): the bundle's attention runs the flash kernel only" >&2
  fi
  cmake -S "$root" -B "$root/build-cuda" -DCMAKE_BUILD_TYPE=Release -DCANONLAB_NATIVE=OFF \
    -DCMAKE_CXX_FLAGS=-march=x86-64-v3 -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON \
    -DCANONLAB_CUDNN_FRONTEND_INCLUDE="$([[ -f "$fe_dir/include/cudnn_frontend.h" ]] && echo "$fe_dir/include")" >/dev/null
  help="$(cmake --build "$root/build-cuda" --target help)"
  [[ "$help" == *canonlab_gpu_tests* ]] ||
    { echo "error: CMake did not enable CUDA in build-cuda (is nvcc installed?); nothing to bundle" >&2; exit 2; }
  # canonlab_cuda_backend_tests: CudaBackend against the CPU backend, model by model (tests/cuda_host/test_cuda_parity.cpp)
  targets=(canonlab canonlab_gpu_tests canonlab_cuda_backend_tests canonlab_gpu_bench)
  # The NCCL communicator's tests, when the toolkit has NCCL: a binary of their own (they load libnccl.so.2).
  [[ "$help" == *canonlab_nccl_tests* ]] && targets+=(canonlab_nccl_tests)
  cmake --build "$root/build-cuda" --target "${targets[@]}" -j "$(nproc)"
  rm -rf "$bundle"
  mkdir -p "$bundle/lib"
  declare -A libs=()  # soname -> file, every library the executables need but the system ones
  for t in "${targets[@]}"; do
    src="$root/build-cuda/$t"
    [[ -x "$src" ]] || src="$root/build-cuda/tests/gpu/$t"
    [[ -x "$src" ]] || src="$root/build-cuda/tests/cuda_host/$t"
    while read -r name arrow path _; do
      [[ "$arrow" == "=>" && "$path" == /* ]] || continue
      system_lib "$name" && continue
      [[ $t == canonlab_nccl_tests ]] && continue  # libnccl.so.2 (218 MB) and its needs: the GPU machine's
      [[ $name == libcublasLt* ]] &&
        { echo "error: $t links $name; cuBLASLt must be opened at run time (src/engine/cuda/cublaslt_loader.cpp)" >&2; exit 2; }
      libs[$name]="$path"
    done < <(env -u LD_LIBRARY_PATH ldd "$src")
    # stripped (symbol tables are a third of the size and nothing reads them), then lib/ beside it
    strip --strip-unneeded -o "$bundle/$t" "$src"
    patchelf --set-rpath '$ORIGIN/lib' "$bundle/$t"
  done
  for name in "${!libs[@]}"; do
    cp -L "${libs[$name]}" "$bundle/lib/$name"
    chmod u+w "$bundle/lib/$name"
    patchelf --set-rpath '$ORIGIN' "$bundle/lib/$name"  # each library finds its own needs next to it
  done
  # What the checks run: the configs, the 75M run's text (the KJV tokens that configs/text/75m.yaml reads by
  # default; scripts/prepare-text-data.sh makes them), the PyTorch reference model, the benchmark's scripts
  cp -r "$root/configs" "$bundle/configs"
  [[ -f "$root/runs/data/kjv-bpe4096/manifest.json" ]] || "$root/scripts/prepare-text-data.sh" "$root/build-cuda/canonlab"
  mkdir -p "$bundle/data" "$bundle/tests/torch_ref" "$bundle/bench"
  cp -r "$root/runs/data/kjv-bpe4096" "$bundle/data/"
  cp "$root"/tests/torch_ref/*.py "$bundle/tests/torch_ref/"
  cp -r "$root/bench/gpu" "$bundle/bench/gpu"
  rm -rf "$bundle/bench/gpu/__pycache__"
  # The benchmark's configs as JSON: the GPU machine's python3 has torch but perhaps not PyYAML.
  py="$root/.venv/bin/python"
  [[ -x "$py" ]] || py=python3
  "$py" "$root/bench/gpu/bench_step_torch.py" --write-configs "$bundle/bench/gpu/configs.json" ||
    echo "warning: no bench/gpu/configs.json (needs torch and PyYAML: scripts/setup-venv.sh); the benchmark then needs PyYAML there" >&2
  # fla's pure-Python wheels for the benchmark's side-by-side (bench/gpu-bench.sh); without a registry, no wheels
  # and the benchmark says so.
  "$py" -m pip download --no-deps -q -d "$bundle/wheels" fla-core==0.6.0 flash-linear-attention==0.6.0 einops ||
    { echo "warning: could not download fla's wheels; the GPU benchmark will time canonlab's kernels alone" >&2;
      rm -rf "$bundle/wheels"; }
  gtest_src=/usr/src/googletest
  [[ -f "$gtest_src/CMakeLists.txt" ]] || { echo "error: $gtest_src missing: apt-get install googletest" >&2; exit 2; }
  mkdir -p "$bundle/googletest"
  (cd "$gtest_src" && tar -ch --exclude=docs --exclude=test --exclude=samples -f - .) | tar -x -C "$bundle/googletest"
  unpacked=$(du -sb "$bundle" | cut -f1)
  echo "bundle uncompressed: $unpacked bytes (lib/ $(du -sb "$bundle/lib" | cut -f1)); the limit: $limit_bytes"
  if ((unpacked > limit_bytes)); then
    # over what may be carried: lib/ as one xz archive, which gpu-check.sh unpacks into /tmp on the GPU machine
    tar -C "$bundle" -cf - lib | xz -9 -T "$(nproc)" >"$bundle/lib.tar.xz"
    rm -rf "${bundle:?}/lib"
    echo "lib/ packed as lib.tar.xz ($(du -sb "$bundle/lib.tar.xz" | cut -f1) bytes)"
  fi
  set +e
  # (a) the bundle as the GPU machine unpacks it: every library inside it or the system's
  unpack_bundle || { echo "error: cannot unpack $bundle/lib.tar.xz" >&2; exit 2; }
  ldd_listing="$(check_ldd "$run")"
  ldd_ok=$?
  echo "$ldd_listing"
  ((ldd_ok == 0)) || { echo "error: a library above resolves OUTSIDE the bundle; it would be missing on the GPU machine" >&2; exit 2; }
  # (b) the bundled CLI with nothing but the bundle's libraries trains a tiny CPU run
  demo="$(mktemp -d)"
  t0=$EPOCHREALTIME
  env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$run/lib" "$run/canonlab" train "$bundle/configs/demo.yaml" \
    --set train.steps=3 --set train.eval_every=0 --quiet --out "$demo/run" >"$demo/log" 2>&1
  rc=$?
  wall=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
  ((rc == 0)) || { cat "$demo/log"; echo "error: the bundled canonlab failed to train configs/demo.yaml (exit $rc)" >&2; exit 2; }
  echo "bundled canonlab, LD_LIBRARY_PATH=<bundle>/lib only: 3 steps of configs/demo.yaml on the CPU in ${wall}s, exit 0"
  rm -rf "$demo"
  [[ "$run" != "$bundle" ]] && rm -rf "$run"
  {
    echo "built:    $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
    echo "commit:   $(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "nvcc:     $(nvcc --version 2>/dev/null | tail -1)"
    echo "cmake:    -DCMAKE_BUILD_TYPE=Release -DCANONLAB_NATIVE=OFF -DCMAKE_CXX_FLAGS=-march=x86-64-v3 -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON"
    echo "sha256:"
    packed=()
    [[ -f "$bundle/lib.tar.xz" ]] && packed=(lib.tar.xz)
    (cd "$bundle" && sha256sum "${targets[@]}" "${packed[@]}" | sed 's/^/  /')
    echo "ldd (LD_LIBRARY_PATH unset, the bundle unpacked):"
    echo "$ldd_listing" | sed 's/^/  /'
  } >"$bundle/MANIFEST"
  size=$(du -sb "$bundle" | cut -f1)
  echo "bundle: $size bytes ($(du -sh "$bundle" | cut -f1)) of the $limit_bytes that may be carried"
  ((size <= limit_bytes)) || { echo "error: the bundle is over the limit" >&2; exit 2; }
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
# A check's time cap: its own, or what the budget has left after 15 s for the tables; "" when under 10 s.
cap() { local c=$1 l=$(( $(left) - 15 )); ((l < c)) && c=$l; ((c >= 10)) && echo "$c"; }
say "gpu-check: bundle $bundle, output $out, budget ${seconds}s"
[[ -f "$bundle/MANIFEST" ]] && cat "$bundle/MANIFEST"
unpack_bundle || { say "error: cannot unpack $bundle/lib.tar.xz"; exit 2; }
[[ "$run" != "$bundle" ]] && say "lib.tar.xz unpacked into $run"
work="$(mktemp -d /tmp/gpu-check-runs.XXXXXX)"  # run directories (the 75M run's checkpoint is about 1 GB)
trap '[[ "$run" != "$bundle" ]] && rm -rf "$run"; rm -rf "$work"' EXIT

{
  echo "== nvidia-smi"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
  else
    echo "(no nvidia-smi)"
  fi
  echo "== nvcc"
  nvcc --version 2>&1 | tail -2 || echo "(no nvcc)"
  echo "== CPU"
  echo "$(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
} >"$out/device.txt"

# cuBLASLt and cuDNN are opened at run time (src/engine/cuda/cublaslt_loader.h, engine/ops/attention/cudnn.h), each
# looking in the toolkit's usual places and Python's nvidia wheels under the usual prefixes itself; a library found
# here anywhere else (another Python's site-packages) is named to it.
find_nvidia_lib() {  # NAME: the directory holding it
  local d
  for d in ${CUDA_HOME:+"$CUDA_HOME/lib64"} /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
           /usr/lib/x86_64-linux-gnu; do
    [[ -e "$d/$1" ]] && { echo "$d"; return 0; }
  done
  if command -v python3 >/dev/null; then
    python3 - "$1" <<'EOF' 2>/dev/null && return 0
import glob, os, site, sys
dirs = site.getsitepackages() + [site.getusersitepackages()] + sys.path
for d in dirs:
    for f in glob.glob(os.path.join(d, "nvidia", "**", sys.argv[1]), recursive=True):
        print(os.path.dirname(f)); sys.exit(0)
sys.exit(1)
EOF
  fi
  return 1
}
if [[ -z "${CANONLAB_CUBLASLT_DIR:-}" ]] && dir="$(find_nvidia_lib libcublasLt.so.13)"; then
  export CANONLAB_CUBLASLT_DIR="$dir"
  say "libcublasLt.so.13 in $dir (CANONLAB_CUBLASLT_DIR)"
fi
# cuDNN's loader looks in $CUDNN_HOME/lib: a wheel's nvidia/cudnn/lib is such a lib/
if [[ -z "${CUDNN_HOME:-}" ]] && dir="$(find_nvidia_lib libcudnn.so.9)"; then
  [[ "$(basename "$dir")" == lib ]] && export CUDNN_HOME="$(dirname "$dir")"
  say "libcudnn.so.9 in $dir${CUDNN_HOME:+ (CUDNN_HOME=$CUDNN_HOME)}"
fi

status=0
rows="$out/.summary-rows"
: >"$rows"
# Step counts: the checks' own, or a few (--quick, the plumbing on a CPU).
e1_steps=300 e1_pause=150 e1_ckpt=50 lin_steps=100 text_steps=100 pack_steps=100 text_small=()
if ((quick)); then
  e1_steps=12 e1_pause=6 e1_ckpt=3 lin_steps=8 text_steps=3 pack_steps=4
  text_small=(--set model.n_layers=2 --set model.d_model=64 --set model.n_heads=4 --set task.context=128 --set train.batch_size=2)
fi
# What each check is (summary.md's first column: the name, which is also its log's, and this)
declare -A what=(
  [kernel-tests]="every suite of canonlab_gpu_tests, one process each"
  [backend-parity]="canonlab_cuda_backend_tests: CudaBackend against the CPU backend, every family and option, one step"
  [nccl]="canonlab_nccl_tests: the NCCL communicator"
  [e1-bk0]="E1-Bk0, $e1_steps steps on $dev against the cpu's: final loss within 2%, copy_acc within 2 points"
  [determinism]="the $dev run again: metrics.jsonl (but timings) and the final checkpoint identical"
  [resume]="the $dev run stopped after step $e1_pause, SIGKILLed, --resume: identical to the uninterrupted run"
  [linear-mamba2]="mamba2-4L128, $lin_steps steps on $dev: learns; final loss within 2% of the cpu's"
  [linear-gla]="gla-4L128-canon-AbCD, as above"
  [linear-gdn]="gdn-4L128-canon-AbCD, as above"
  [linear-deltanet]="deltanet-4L128, as above"
  [linear-hybrid]="hybrid-MMMA-4L128-canon-AbCD, as above"
  [text-75m]="configs/text/75m.yaml, $text_steps steps bf16 on $dev, KJV tokens: learns; bpc, tokens/s, MFU"
  [packs]="4 key-shift runs of E1-Bk0 ($pack_steps steps) as one --pack 4 sweep against each alone: final checkpoints identical"
  [memcheck]="compute-sanitizer memcheck over the index-heavy kernel suites, at most 60 s"
  [benchmark]="bench/gpu-bench.sh: the linear layers, one training step against PyTorch, fla"
)
# One line of summary.md; a FAIL makes the exit status 1, and so does a check the budget did not reach.
row() {
  [[ $2 == FAIL && $4 == *"not run: out of time"* ]] && set -- "$1" SKIPPED "$3" "$4"  # the budget, not the check
  printf '| %s: %s | %s | %s | %s |\n' "$1" "${what[$1]:-}" "$2" "${3//|//}" "${4//|//}" >>"$rows"
  say "$1: $2${3:+ | $3}${4:+ | $4}"
  [[ $2 == FAIL || $4 == *"not run: out of time"* ]] && status=1
  return 0
}

# ---- 1. the kernel tests, one suite per process ----
bin="$run/canonlab_gpu_tests"
bench_bin="$run/canonlab_gpu_bench"
starts() { [[ -x "$1" ]] && "$1" --gtest_list_tests >/dev/null 2>&1; }
tests_ok=1
if ! starts "$bin"; then
  say "the bundle's test binary does not start here ($(ldd "$bin" 2>&1 | grep -m1 'not found\|GLIBC' || echo "see check.log")); rebuilding"
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
    fi
  fi
  starts "$bin" || { say "error: no runnable GPU test binary (see build.log and check.log)"; tests_ok=0; }
fi
gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')"
no_gpu=0 no_gpu_reason=""
results="$out/.suites" && mkdir -p "$results"
: >"$out/kernel-tests.log"
if ((tests_ok)); then
  say "tests: $bin"
  "$bin" --gtest_filter='CublasLtLoader.*' 2>&1 | grep -m1 '^cuBLASLt: ' >>"$out/device.txt"
  suites=()
  while IFS= read -r line; do
    [[ "$line" =~ ^([^[:space:]#][^[:space:]]*)\.(\ .*)?$ ]] && suites+=("${BASH_REMATCH[1]}")
  done < <("$bin" --gtest_list_tests)
  say "${#suites[@]} suites"
  # Is there a device? The tests' own check (cudaGetDeviceCount, gpu_test.h) decides, through one tiny test.
  probe="$("$bin" --gtest_filter='GpuCanonLimits.*' 2>&1)"
  if grep -q 'no CUDA device' <<<"$probe"; then
    no_gpu_reason="$(grep -m1 -o 'no CUDA device.*' <<<"$probe")"
    if ((${gpus:-0} > 0)); then
      # nvidia-smi sees a GPU the CUDA runtime cannot use (e.g. a driver older than CUDA 13 needs): a failure, not
      # the no-GPU dry run
      say "error: nvidia-smi lists ${gpus} GPU(s) but the tests say: $no_gpu_reason (driver too old for CUDA 13?)"
      no_gpu_reason=""
      status=1
    else
      no_gpu=1
      say "NO GPU: $no_gpu_reason"
      say "every check will report SKIPPED$([[ $dev == cpu ]] && echo ', but the training checks run on the CPU (--train-device cpu)'); exit status 3"
    fi
  fi
  t_tests=$SECONDS
  for s in "${suites[@]}"; do
    safe="${s//\//_}"
    budget=$(cap 60)  # a suite is seconds on a GPU; a hang costs at most a minute
    if [[ -z $budget ]]; then
      echo "$s|124|0|not run: out of time" >>"$results/runs"
      continue
    fi
    t0=$SECONDS
    timeout "$budget" "$bin" --gtest_filter="$s.*" --gtest_output="xml:$results/$safe.xml" >"$results/$safe.log" 2>&1
    rc=$?
    cat "$results/$safe.log" >>"$out/kernel-tests.log"
    note=""
    ((rc == 124)) && note="timed out"
    ((rc != 0 && rc != 124)) && note="exit status $rc"
    echo "$s|$rc|$((SECONDS - t0))|$note" >>"$results/runs"
  done
  t_tests=$((SECONDS - t_tests))
else
  no_gpu=$(( ${gpus:-0} == 0 ))
  ((no_gpu)) && no_gpu_reason="no CUDA device: nvidia-smi lists none"
fi

# The kernel tests' table (results.md) and its verdict: 0 all passed, 1 a failure, 3 no failure but skips.
python3 - "$results" "$out/results.md" "$out/device.txt" "$no_gpu_reason" >"$out/.tests-verdict" <<'EOF'
import glob, os, sys, xml.etree.ElementTree as ET
results, path, device, no_gpu = sys.argv[1:5]
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
    f.write("# GPU kernel tests\n\n")
    if no_gpu:
        f.write(f"**NO GPU: {no_gpu}.** The tests that need a device were SKIPPED; nothing on a GPU was verified.\n\n")
    dev = open(device).read().strip() if os.path.exists(device) else "(unknown)"
    f.write("```\n" + dev + "\n```\n\n")
    f.write("| suite | tests | passed | failed | skipped | s | note |\n|---|---:|---:|---:|---:|---:|---|\n")
    for r in rows:
        f.write("| " + " | ".join(str(x) for x in r) + " |\n")
    f.write(f"| **all** | {totals[0]} | {totals[1]} | {totals[2]} | {totals[3]} | | |\n\n")
    if failed_tests:
        f.write("Failed:\n\n" + "".join(f"- `{t}`\n" for t in failed_tests) + "\n")
print(f"{totals[1]} passed, {totals[2]} failed, {totals[3]} skipped of {totals[0]}|{' '.join(failed_tests)[:300]}")
sys.exit(1 if failed_tests else 3 if totals[3] else 0)
EOF
tests_rc=$?
IFS='|' read -r measured note <"$out/.tests-verdict"
if ((!tests_ok)); then row kernel-tests FAIL "" "no runnable canonlab_gpu_tests (build.log, check.log)"
elif ((tests_rc == 0)); then row kernel-tests PASS "$measured in ${t_tests}s" ""
elif ((tests_rc == 3 && no_gpu)); then row kernel-tests SKIPPED "$measured" "$no_gpu_reason"
elif ((tests_rc == 3)); then row kernel-tests FAIL "$measured" "tests skipped although a GPU is listed (kernel-tests.log)"
else row kernel-tests FAIL "$measured" "failed: ${note:-see results.md}"
fi
rm -rf "$results" "$out/.tests-verdict"

# ---- 1b. CudaBackend against the CPU backend, model by model: every family and option, one step's loss, logits and
# gradients (the parity cases the CPU suite runs through the host stand-in of the CUDA layer, here on the GPU) ----
if [[ ! -x "$run/canonlab_cuda_backend_tests" ]]; then row backend-parity SKIPPED "" "no canonlab_cuda_backend_tests in the bundle"
elif ((no_gpu)); then row backend-parity SKIPPED "" "$no_gpu_reason"
elif ! limit=$(cap 90); then row backend-parity SKIPPED "" "not run: out of time"
else
  CANONLAB_SOURCE_DIR="$bundle" OMP_NUM_THREADS=$(nproc) timeout "$limit" env LD_LIBRARY_PATH="$run/lib" \
    "$run/canonlab_cuda_backend_tests" >"$out/backend-parity.log" 2>&1
  rc=$?
  measured="$(grep -c '^\[       OK \]' "$out/backend-parity.log") ok, $(grep -c '^\[  FAILED  \]' "$out/backend-parity.log") failed, $(grep -c '^\[  SKIPPED \]' "$out/backend-parity.log") skipped"
  if ((rc == 0)); then row backend-parity PASS "$measured" "Models/CudaBackendOnGpu.*: every family against the CPU backend"
  else row backend-parity FAIL "$measured" "exit status $rc (backend-parity.log)"; fi
fi

# ---- 2. the NCCL communicator (tests/gpu/nccl/): libnccl.so.2 from the toolkit or PyTorch's nvidia-nccl wheel ----
if [[ ! -x "$run/canonlab_nccl_tests" ]]; then row "nccl" SKIPPED "" "no canonlab_nccl_tests in the bundle"
elif ((no_gpu)); then row "nccl" SKIPPED "" "$no_gpu_reason"
elif ! limit=$(cap 60); then row "nccl" SKIPPED "" "not run: out of time"
else
  nccl_dir="$(python3 -c 'import glob,os,site,sys
for d in ["/usr/local/cuda/lib64", "/usr/local/cuda/lib"] + site.getsitepackages() + sys.path:
    for f in glob.glob(os.path.join(d, "**", "libnccl.so.2"), recursive=True):
        print(os.path.dirname(f)); sys.exit(0)' 2>/dev/null || true)"
  LD_LIBRARY_PATH="${nccl_dir:+$nccl_dir:}${LD_LIBRARY_PATH:-}" timeout "$limit" "$run/canonlab_nccl_tests" \
    >"$out/nccl.log" 2>&1
  rc=$?
  measured="$(grep -c '^\[       OK \]' "$out/nccl.log") ok, $(grep -c '^\[  SKIPPED \]' "$out/nccl.log") skipped"
  if ((rc == 0)); then row "nccl" PASS "$measured" "libnccl from ${nccl_dir:-the loader path}"
  else row "nccl" FAIL "$measured" "exit status $rc (nccl.log)"; fi
fi

# ---- 3. training through the bundled CLI ----
cfg="$bundle/configs" data="$bundle/data/kjv-bpe4096"
[[ -d "$cfg" ]] || cfg="$root/configs"
cpu_threads=$(nproc)
# canonlab with the bundle's libraries only (LD_LIBRARY_PATH: its lib/), output appended to LOG; $wall: its seconds.
# Returns canonlab's exit status (124: it hit LIMIT), also kept in $cl_rc (`if ! cl ...` leaves 0 in $?).
cl() {
  local log=$1 limit=$2 t0=$EPOCHREALTIME rc
  shift 2
  echo "+ canonlab $*" >>"$log"
  timeout -k 10 "$limit" env LD_LIBRARY_PATH="$run/lib" "$run/canonlab" "$@" >>"$log" 2>&1  # -k: past a stop signal's checkpoint
  rc=$?
  cl_rc=$rc
  wall=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
  echo "(exit status $rc after ${wall}s)" >>"$log"
  return $rc
}
# Why a run failed, for the note: the budget's end, its own cap, or its error line.
why() {
  if (($1 == 124 && $(left) <= 20)); then echo "not run: out of time (stopped at the budget's end after ${2}s)"
  elif (($1 == 124)); then echo "timed out after ${2}s"
  else echo "exit status $1: $(tail -n 20 "$3" | grep -m1 -i 'error' | cut -c1-160)"; fi
}
# Keeps a run's small records in OUT/runs/NAME (the run directories stay in /tmp).
keep() { mkdir -p "$out/runs/$2" && cp "$1"/summary.json "$1"/metrics.jsonl "$out/runs/$2/" 2>/dev/null; return 0; }
compare() { python3 "$root/scripts/gpu-check-compare.py" "$@"; }
# Runs the comparison and writes its row: PASS when it exits 0.
verdict() {
  local name=$1 res rc measured note
  shift
  res="$(compare "$@")"
  rc=$?
  measured="${res%%|*}" note="${res#*|}"
  if ((rc == 0)); then row "$name" PASS "$measured" "$note"; else row "$name" FAIL "$measured" "$note"; fi
}

train_skip=""  # why the training checks cannot run
if ((no_gpu)) && [[ $dev == cuda ]]; then train_skip="$no_gpu_reason"
elif [[ ! -x "$run/canonlab" ]]; then train_skip="no canonlab in the bundle"
elif ! env LD_LIBRARY_PATH="$run/lib" "$run/canonlab" --help >/dev/null 2>&1; then
  train_skip="the bundled canonlab does not start here: $(env LD_LIBRARY_PATH="$run/lib" ldd "$run/canonlab" 2>&1 | grep -m1 'not found\|GLIBC')"
fi
e1=("$cfg/E1-Bk0.yaml" --set "train.steps=$e1_steps" --set "train.checkpoint_every=$e1_ckpt" --quiet)

checks=(e1-bk0 determinism resume linear-mamba2 linear-gla linear-gdn linear-deltanet linear-hybrid text-75m packs)
if [[ -n $train_skip ]]; then
  for c in "${checks[@]}"; do row "$c" SKIPPED "" "$train_skip"; done
else
  say "training checks on $dev through $run/canonlab"
  # E1-Bk0 on the GPU against the CPU: the loss curve's end and copy_acc
  log="$out/e1-bk0.log"
  if ! limit=$(cap 90); then row e1-bk0 SKIPPED "" "not run: out of time"
  elif ! cl "$log" "$limit" train "${e1[@]}" --set train.device=$dev --out "$work/e1-a"; then
    row e1-bk0 FAIL "" "$dev run: $(why $cl_rc "$limit" "$log")"
  else
    keep "$work/e1-a" e1-a
    gpu_wall=$wall
    if ! limit=$(cap 120); then row e1-bk0 SKIPPED "$dev ${gpu_wall}s" "not run: out of time (the cpu run)"
    elif ! cl "$log" "$limit" train "${e1[@]}" --set train.device=cpu --set train.threads=$cpu_threads --out "$work/e1-cpu"; then
      row e1-bk0 FAIL "$dev ${gpu_wall}s" "cpu run: $(why $cl_rc "$limit" "$log")"
    else
      keep "$work/e1-cpu" e1-cpu
      res="$(compare curves "$work/e1-a" "$work/e1-cpu")"
      rc=$?
      m="${res%%|*}; $dev ${gpu_wall}s, cpu ($cpu_threads threads) ${wall}s"
      if ((rc == 0)); then row e1-bk0 PASS "$m" "${res#*|}"; else row e1-bk0 FAIL "$m" "${res#*|}"; fi
    fi
  fi
  # The same run again: the same bits
  log="$out/determinism.log"
  if [[ ! -f "$work/e1-a/summary.json" ]]; then row determinism SKIPPED "" "no first run (e1-bk0)"
  elif ! limit=$(cap 90); then row determinism SKIPPED "" "not run: out of time"
  elif ! cl "$log" "$limit" train "${e1[@]}" --set train.device=$dev --out "$work/e1-b"; then
    row determinism FAIL "" "$(why $cl_rc "$limit" "$log")"
  else
    verdict determinism same "$work/e1-b" "$work/e1-a"
  fi
  # Killed mid-run and resumed: the process stops itself after step e1_pause (CANONLAB_PAUSE_AT, a checkpoint just
  # written), is killed with SIGKILL, and --resume finishes it
  log="$out/resume.log"
  if [[ ! -f "$work/e1-a/summary.json" ]]; then row resume SKIPPED "" "no uninterrupted run (e1-bk0)"
  elif ! limit=$(cap 120); then row resume SKIPPED "" "not run: out of time"
  else
    echo "+ CANONLAB_PAUSE_AT=after-step:$e1_pause canonlab train ${e1[*]} --set train.device=$dev --out $work/e1-r" >>"$log"
    CANONLAB_PAUSE_AT=after-step:$e1_pause LD_LIBRARY_PATH="$run/lib" "$run/canonlab" train "${e1[@]}" \
      --set train.device=$dev --out "$work/e1-r" >>"$log" 2>&1 &
    pid=$! paused=0
    for ((i = 0; i < 5 * limit; i++)); do  # state T: stopped by its own SIGSTOP
      state="$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null)" || break
      [[ $state == T ]] && { paused=1; break; }
      [[ $state == Z ]] && break  # it ended (an error) before the pause
      sleep 0.2
    done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    if ((!paused)); then row resume FAIL "" "it did not stop after step $e1_pause within ${limit}s (resume.log)"
    elif ! limit=$(cap 90); then row resume SKIPPED "killed after step $e1_pause" "not run: out of time (the resume)"
    elif ! cl "$log" "$limit" train "${e1[@]}" --set train.device=$dev --out "$work/e1-r" --resume; then
      row resume FAIL "killed after step $e1_pause" "the resume: $(why $cl_rc "$limit" "$log")"
    else
      keep "$work/e1-r" e1-resumed
      verdict resume same "$work/e1-r" "$work/e1-a"
    fi
  fi
  # Every linear family and a hybrid: learns on the GPU, and ends where the CPU does
  lin=(--set "train.steps=$lin_steps" --set train.eval_every=0 --set train.checkpoint_every=0 --set train.log_every=10 --quiet)
  for pair in mamba2:mamba2-4L128 gla:gla-4L128-canon-AbCD gdn:gdn-4L128-canon-AbCD deltanet:deltanet-4L128 \
              hybrid:hybrid-MMMA-4L128-canon-AbCD; do
    name="linear-${pair%%:*}" config="$cfg/linear/${pair#*:}.yaml" log="$out/linear-${pair%%:*}.log"
    if ! limit=$(cap 45); then row "$name" SKIPPED "" "not run: out of time"
    elif ! cl "$log" "$limit" train "$config" "${lin[@]}" --set train.device=$dev --out "$work/$name"; then
      row "$name" FAIL "" "${pair#*:}: $(why $cl_rc "$limit" "$log")"
    else
      keep "$work/$name" "$name"
      gpu_wall=$wall
      if limit=$(cap 45) && cl "$log" "$limit" train "$config" "${lin[@]}" --set train.device=cpu \
           --set train.threads=$cpu_threads --out "$work/$name-cpu"; then
        res="$(compare learns "$work/$name" "$work/$name-cpu")"
        rc=$?
        m="${res%%|*}; $dev ${gpu_wall}s, cpu ${wall}s"
      else
        res="$(compare learns "$work/$name")"
        rc=$?
        m="${res%%|*}; $dev ${gpu_wall}s; no cpu run (out of time or failed: $name.log)"
      fi
      if ((rc == 0)); then row "$name" PASS "$m" "${res#*|}"; else row "$name" FAIL "$m" "${res#*|}"; fi
    fi
  done
  # The 75M text model, 100 steps in bf16 on the bundle's KJV tokens: bpc, tokens/s, MFU against the bf16 GEMM rate
  # measured here (bench/gpu/bench_step_torch.py --gemm-only: torch.matmul 8192^3), else the nominal 989 TFLOP/s
  log="$out/text-75m.log"
  text=("$cfg/text/75m.yaml" --set "train.steps=$text_steps" --set "train.device=$dev" --set train.precision=bf16
        --set task.text.path="$data" --set task.text.eval_whole_split=false --set train.eval_batches=2
        --set train.checkpoint_every=0 --set train.log_every=10 "${text_small[@]}" --quiet)
  if [[ ! -f "$data/manifest.json" ]]; then row text-75m SKIPPED "" "no $data in the bundle"
  elif ! limit=$(cap 180); then row text-75m SKIPPED "" "not run: out of time"
  else
    # the FLOPs per step, from the estimate (which exits 2 only when the run would not fit)
    cl "$work/text-dry-run.txt" 60 train "${text[@]}" --dry-run
    cat "$work/text-dry-run.txt" >>"$log"
    bench_dir="$bundle/bench/gpu"
    [[ -f "$bench_dir/bench_step_torch.py" ]] || bench_dir="$root/bench/gpu"
    [[ $dev == cuda ]] && timeout 60 python3 "$bench_dir/bench_step_torch.py" --gemm-only >"$work/gemm.json" 2>>"$log"
    cat "$work/gemm.json" >>"$log" 2>/dev/null
    if ! limit=$(cap 180); then row text-75m SKIPPED "" "not run: out of time"
    elif ! cl "$log" "$limit" train "${text[@]}" --out "$work/text-75m"; then
      keep "$work/text-75m" text-75m
      m="$(compare progress "$work/text-75m")"
      row text-75m FAIL "${m%%|*}" "$(why $cl_rc "$limit" "$log")"
    else
      keep "$work/text-75m" text-75m
      res="$(compare text "$work/text-75m" --dry-run "$work/text-dry-run.txt" --gemm-json "$work/gemm.json")"
      rc=$?
      m="${res%%|*}; ${wall}s"
      if ((rc == 0)); then row text-75m PASS "$m" "${res#*|}"; else row text-75m FAIL "$m" "${res#*|}"; fi
    fi
  fi
  # Packed sweeps: four runs of a key-shift study (E1-Bk0's key shift on layer 0, 1, 2 or 3) in one pack, against
  # the same four trained one by one from their run.yaml: every final checkpoint byte-identical
  log="$out/packs.log"
  cat >"$work/pack-sweep.yaml" <<EOF
name: gpu-check-pack
description: scripts/gpu-check.sh's pack check, E1-Bk0 with the key shift on each of its 4 layers
base: $cfg/E1-Bk0.yaml
set:
  train.device: $dev
  train.steps: $pack_steps
  train.eval_every: 0
  train.checkpoint_every: 0
axes:
  - name: layer
    key: model.attention.key_shift.layers
    values: [[0], [1], [2], [3]]
    labels: [L0, L1, L2, L3]
EOF
  cat "$work/pack-sweep.yaml" >>"$log"
  if ! limit=$(cap 120); then row packs SKIPPED "" "not run: out of time"
  elif ! cl "$log" "$limit" sweep "$work/pack-sweep.yaml" --pack 4 --out "$work/pack"; then
    row packs FAIL "" "the packed sweep: $(why $cl_rc "$limit" "$log")"
  else
    pack_wall=$wall single_wall=0 failed=""
    for d in "$work/pack/runs"/*/; do
      r="$(basename "$d")"
      if ! limit=$(cap 60); then failed="not run: out of time"; break; fi
      cl "$log" "$limit" train "$d/run.yaml" --quiet --out "$work/single/$r" || { failed="$r alone: $(why $cl_rc "$limit" "$log")"; break; }
      single_wall=$(awk -v a="$single_wall" -v b="$wall" 'BEGIN { printf "%.1f", a + b }')
    done
    if [[ -n $failed ]]; then row packs "$([[ $failed == not\ run* ]] && echo SKIPPED || echo FAIL)" "" "$failed"
    else
      res="$(compare checkpoints "$work/pack" "$work/single")"
      rc=$?
      m="${res%%|*}; pack of 4 ${pack_wall}s, one by one ${single_wall}s"
      if ((rc == 0)); then row packs PASS "$m" "${res#*|}"; else row packs FAIL "$m" "${res#*|}"; fi
    fi
  fi
fi

# ---- 4. out-of-bounds accesses: compute-sanitizer's memcheck over the index-heavy suites, where the tool works ----
# (it does on Firecracker machines, not on gVisor ones: docs/gpu.md). Advisory in time, binding in result.
sanitizer="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)"
if ((no_gpu)); then row memcheck SKIPPED "" "$no_gpu_reason"
elif ((!tests_ok)); then row memcheck SKIPPED "" "no runnable canonlab_gpu_tests"
elif [[ -z "$sanitizer" ]]; then row memcheck SKIPPED "" "no compute-sanitizer"
elif ! limit=$(cap 60) || ((limit < 30)); then row memcheck SKIPPED "" "not run: out of time"
else
  timeout "$limit" "$sanitizer" --tool memcheck --error-exitcode 99 "$bin" \
    --gtest_filter='Shapes/GpuAttention.*:Shapes/GpuCanon.*:Shapes/GpuNorm.*:GpuLookup.*:GpuElementwise.*:Shapes/GpuSsd.*:Shapes/GpuGla.*:Shapes/GpuDeltaRule.*:GpuLinearGlue.*:GpuDecode.*' \
    >"$out/memcheck.log" 2>&1
  rc=$?
  if ((rc == 0)); then row memcheck PASS "clean: attention, canon, norm, lookup, elementwise, ssd, gla, delta-rule, linear glue, decode suites" ""
  elif ((rc == 99)); then row memcheck FAIL "errors (memcheck.log)" ""
  elif ((rc == 124)); then row memcheck SKIPPED "no error in the first ${limit}s" "stopped by its cap (memcheck.log)"
  elif grep -q "not supported" "$out/memcheck.log"; then row memcheck SKIPPED "" "unavailable on this machine (memcheck.log)"
  else row memcheck FAIL "exit status $rc" "a test failure under memcheck (memcheck.log)"
  fi
fi

# ---- 5. the GPU benchmark: bench/gpu-bench.sh OUT_DIR (what is left of the budget; its output is bench.log) ----
if ((no_gpu)); then row benchmark SKIPPED "" "$no_gpu_reason"
elif [[ ! -x "$root/bench/gpu-bench.sh" ]]; then row benchmark SKIPPED "" "no bench/gpu-bench.sh"
elif ! limit=$(cap 100000) || ((limit < 30)); then row benchmark SKIPPED "" "not run: out of time"
else
  CANONLAB_GPU_BUNDLE="$bundle" CANONLAB_GPU_RUN="$run" CANONLAB_GPU_BENCH_BIN="$bench_bin" \
    CANONLAB_GPU_SECONDS=$((limit - 10)) timeout "$limit" "$root/bench/gpu-bench.sh" "$out" >"$out/bench.log" 2>&1
  rc=$?
  measured="$(grep -cE '\| [0-9]+\.[0-9]+ \| [0-9,]+ \|' "$out/bench_step.md" 2>/dev/null || echo 0) step-benchmark rows measured (bench_step.md), layer benchmark in bench.log"
  if ((rc == 0)); then row benchmark PASS "$measured" ""; else row benchmark FAIL "$measured" "exit status $rc (bench.log)"; fi
fi

# ---- the summary ----
((no_gpu && status == 0)) && status=3
{
  echo "# GPU check: summary"
  echo
  ((no_gpu)) && echo "**NO GPU: ${no_gpu_reason}.** Nothing on a GPU was verified." && echo
  echo "device: $(grep -m1 -A1 '^name, driver' "$out/device.txt" | tail -n +2 | grep . || echo 'no nvidia-smi'); $(nproc) CPU cores"
  echo "bundle: $(grep -m1 '^commit:' "$bundle/MANIFEST" 2>/dev/null | sed 's/^commit: *//'); budget ${seconds}s, used $((SECONDS - start))s; exit status $status"
  echo
  echo "| check | status | measured | note |"
  echo "|---|---|---|---|"
  cat "$rows"
} >"$out/summary.md"
rm -f "$rows"
say "gpu-check: done in $((SECONDS - start))s, exit status $status; $out/summary.md"
exit $status
