#!/usr/bin/env bash
# Builds canonlab's libFuzzer targets (tests/fuzz/) with clang and ASan + UBSan, and runs each for a given time.
#
#   scripts/fuzz.sh [--seconds N] [--build-dir DIR] [--build-only | --no-build] [--keep-going | --replay] [TARGET...]
#
#   TARGET        yaml_config checkpoint_json safetensors sweep grammar hf_folder (default: all six)
#   --seconds N   fuzzing time per target (default 60); each target first runs its large regression inputs
#   --build-dir   where the clang build, working corpora and findings go (default: build-fuzz)
#   --build-only  configure and build, run nothing;  --no-build: run what DIR already holds
#   --keep-going  fuzz in libFuzzer's fork mode, which records a finding and carries on instead of stopping at
#                 the first one (for hunting bugs; the default stops at the first)
#   --replay      explore nothing: run every committed input (tests/fuzz/corpus/<target>/, its regress-* files
#                 among them) and the large regression inputs once each, with a fixed seed, and stop. This is
#                 what ctest runs: the same inputs give the same verdict on every run and every machine, while
#                 fuzzing for N seconds finds different inputs on a faster or a busier machine. Exploring is
#                 this script's job without --replay; copy what it finds into the corpus once it is fixed.
#
# A finding is a sanitizer report, an exception other than canonlab::Error, a broken invariant, a timeout
# (-timeout=10 s per input; 60 s for the large regression inputs) or running out of memory
# (-rss_limit_mb=2048). A run's findings are kept under DIR/run/<target>/findings/ (the run before's in
# findings.previous/); reproduce one with DIR/fuzz_<target> <file>. Prints a table of targets, executions,
# time and findings. Exit status: 0 clean, 1 findings or a failure, 77 clang or libFuzzer missing (ctest
# reports the fuzz tests as skipped then). tests/fuzz/README.md says what each target checks.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
all_targets=(yaml_config checkpoint_json safetensors sweep grammar hf_folder)

seconds=60 build_dir="$root/build-fuzz" build=1 run=1 keep_going=0 replay=0 targets=()
while (($#)); do
  case "$1" in
    --seconds) seconds="${2:?--seconds needs a number}"; shift 2 ;;
    --build-dir) build_dir="${2:?--build-dir needs a directory}"; shift 2 ;;
    --build-only) run=0; shift ;;
    --no-build) build=0; shift ;;
    --keep-going) keep_going=1; shift ;;
    --replay) replay=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "error: unknown option '$1'; see scripts/fuzz.sh --help" >&2; exit 1 ;;
    *) targets+=("$1"); shift ;;
  esac
done
((${#targets[@]})) || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  [[ " ${all_targets[*]} " == *" $t "* ]] || { echo "error: unknown fuzz target '$t'; allowed: ${all_targets[*]}" >&2; exit 1; }
done
((keep_going && replay)) && { echo "error: --keep-going and --replay exclude each other (--replay explores nothing)" >&2; exit 1; }
[[ "$seconds" =~ ^[1-9][0-9]*$ ]] || { echo "error: --seconds '$seconds': expected a whole number of seconds >= 1" >&2; exit 1; }
mkdir -p "$build_dir"
build_dir="$(cd "$build_dir" && pwd)"

# Skip (77) rather than pass when the toolchain is missing: clang++ itself, and its libFuzzer runtime, which
# Debian ships separately (libclang-rt-14-dev, only a Recommends of clang).
if ! command -v clang++ >/dev/null || ! command -v clang >/dev/null; then
  echo "SKIPPED: clang/clang++ not found; the fuzz targets need clang's libFuzzer (apt-get install clang libclang-rt-14-dev, see scripts/install-deps.sh)"
  exit 77
fi
probe="$build_dir/libfuzzer-probe"
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' > "$probe.cpp"
if ! clang++ -fsanitize=fuzzer,address,undefined "$probe.cpp" -o "$probe" 2> "$probe.log"; then
  echo "SKIPPED: clang++ cannot link a libFuzzer target with ASan+UBSan (libclang_rt.fuzzer missing?); apt-get install libclang-rt-14-dev. The compiler said:"
  sed 's/^/  /' "$probe.log" | head -5
  exit 77
fi

if ((build)); then
  if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
    CC=clang CXX=clang++ cmake -S "$root/tests/fuzz" -B "$build_dir" >/dev/null
  fi
  echo "building the fuzz targets in $build_dir (log: $build_dir/build.log)"
  if ! cmake --build "$build_dir" -j "$(nproc)" > "$build_dir/build.log" 2>&1; then
    grep -E -A3 'error|Error' "$build_dir/build.log" | head -40 >&2
    echo "error: building the fuzz targets failed; see $build_dir/build.log" >&2
    exit 1
  fi
  # Regression inputs too large to commit (deeply nested documents), regenerated with the build.
  rm -rf "$build_dir/regression"
  python3 "$root/tests/fuzz/make_seeds.py" large "$build_dir/regression"
fi
((run)) || exit 0
for t in "${targets[@]}"; do
  [[ -x "$build_dir/fuzz_$t" ]] || { echo "error: $build_dir/fuzz_$t is missing; build it with scripts/fuzz.sh --build-only --build-dir $build_dir" >&2; exit 1; }
done

export ASAN_OPTIONS="${ASAN_OPTIONS:-allocator_may_return_null=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
limits=(-timeout=10 -rss_limit_mb=2048)
# Replay judges what an input does, not how fast: a committed input that takes 7 s under the sanitizers on an idle
# machine (the 72-run Capo grid) must not become a "timeout" on a busy one. The limit only catches a real hang.
replay_timeout=300
dict_of() { case "$1" in yaml_config|sweep) echo "$root/tests/fuzz/dict/yaml.dict" ;; *) echo "$root/tests/fuzz/dict/json.dict" ;; esac; }

summary=() total_findings=0
for t in "${targets[@]}"; do
  work="$build_dir/run/$t"
  # findings/ holds this run's findings only; the previous run's are kept once, in findings.previous/.
  rm -rf "$work/findings.previous" "$work/tmp" "$work"/*.log
  [[ -d "$work/findings" ]] && mv "$work/findings" "$work/findings.previous"
  mkdir -p "$work/corpus" "$work/findings" "$work/tmp"
  # The fuzzer runs in a scratch copy of configs/: relative paths in fuzzed configs (base: E1-Bk0.yaml,
  # task.lano.grammar, ...) resolve there, data paths fall back to the checkout. Its temporary files go beside.
  cp -r "$root/configs" "$work/tmp/configs"
  export TMPDIR="$work/tmp"
  binary="$build_dir/fuzz_$t"

  # 1. The large regression inputs, one process each so that every one is tried. They are about depth, not
  #    time, and a 400 KB document takes seconds under the sanitizers, so these get a 60 s timeout (replay: see
  #    replay_timeout below).
  regress_timeout=60
  ((replay)) && regress_timeout=$replay_timeout
  regress_failed=0 regress_total=0
  for input in "$build_dir/regression/$t"/*; do
    [[ -f "$input" ]] || continue
    regress_total=$((regress_total + 1))
    log="$work/regress-$(basename "$input").log"
    if ! (cd "$work/tmp/configs" && "$binary" -timeout="$regress_timeout" -rss_limit_mb=2048 "$input") > "$log" 2>&1; then
      regress_failed=$((regress_failed + 1))
      cp "$input" "$work/findings/regress-$(basename "$input")"
      echo "FINDING: fuzz_$t on regression input $(basename "$input"); log: $log"
      grep -m1 -E 'ERROR: |terminate called|invariant violated|runtime error|ALARM|out-of-memory' "$log" | sed 's/^/  /' || true
    fi
  done

  # 2. Fuzzing, from the committed seeds plus the working corpus kept in the build directory (the first
  #    directory, where libFuzzer adds what it finds; the committed one is never written to). Replay runs the
  #    committed inputs alone (-runs=0: the seed corpus once, no mutation), beside an empty first directory, so
  #    that neither an earlier exploration's corpus nor the run's own history changes what is run.
  log="$work/fuzz.log"
  start=$(date +%s)
  status=0
  if ((replay)); then
    echo "fuzz_$t: replaying tests/fuzz/corpus/$t (log: $log)"
    rm -rf "$work/replay-corpus" && mkdir -p "$work/replay-corpus"
    (cd "$work/tmp/configs" && "$binary" -seed=1 -runs=0 -timeout="$replay_timeout" -rss_limit_mb=2048 \
       -print_final_stats=1 -artifact_prefix="$work/findings/" "$work/replay-corpus" "$root/tests/fuzz/corpus/$t") \
       > "$log" 2>&1 || status=$?
  else
    mode=()
    ((keep_going)) && mode=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
    echo "fuzz_$t: ${seconds}s (log: $log)"
    (cd "$work/tmp/configs" && "$binary" "${limits[@]}" "${mode[@]}" -max_total_time="$seconds" -print_final_stats=1 \
       -dict="$(dict_of "$t")" -artifact_prefix="$work/findings/" "$work/corpus" "$root/tests/fuzz/corpus/$t") \
       > "$log" 2>&1 || status=$?
  fi
  elapsed=$(( $(date +%s) - start ))
  if ((keep_going)); then
    execs=$(grep -oE '#[0-9]+: cov' "$log" | tail -1 | tr -dc '0-9' || true)
  else
    execs=$(grep -oE 'stat::number_of_executed_units: [0-9]+' "$log" | awk '{print $2}' | tail -1 || true)
  fi
  execs=${execs:-0}
  new_findings=$(( $(find "$work/findings" -type f | wc -l) - regress_failed ))
  if ((status != 0 && new_findings == 0)); then
    # The fuzzer stopped on a problem that left no artifact (e.g. a crash while loading the seed corpus).
    new_findings=1
    echo "FINDING: fuzz_$t stopped with status $status and wrote no input; see $log"
  fi
  findings=$((regress_failed + new_findings))
  if ((new_findings)); then
    grep -E 'ERROR: |terminate called|invariant violated|runtime error|ALARM|out-of-memory|Test unit written' "$log" \
      | sort -u | head -20 | sed 's/^/  /' || true
  fi
  total_findings=$((total_findings + findings))
  rate=$(( elapsed > 0 ? execs / elapsed : execs ))
  summary+=("$(printf '%-16s %8s %12s %9s %8s %9s' "$t" "$((regress_total - regress_failed))/$regress_total" \
                "$execs" "$elapsed" "$rate" "$findings")")
done

echo
printf '%-16s %8s %12s %9s %8s %9s\n' target regress executions "time (s)" "exec/s" findings
printf '%s\n' "${summary[@]}"
if ((total_findings)); then
  echo "findings: $total_findings; the inputs are under $build_dir/run/<target>/findings/ (reproduce: $build_dir/fuzz_<target> <file>)"
  exit 1
fi
