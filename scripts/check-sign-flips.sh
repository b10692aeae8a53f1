#!/usr/bin/env bash
# Mutation check for the promise "a deliberate sign flip in any backward makes a test fail": for each
# mutation below, copy src/ aside, flip one sign in a backward pass, rebuild the whole-model gradient checks
# against the mutated copy, and count failing tests. Every line must report at least one failure.
# Not part of the suite (each mutation is a rebuild, ~1 min on 2 cores). Run from anywhere after scripts/build.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mutations=(
  "src/nn/canon.h|din[i] += dout[i];|din[i] -= dout[i];"
  "src/nn/attention.h|for (int c = 0; c < C_; c++) out[c] += next[c];|for (int c = 0; c < C_; c++) out[c] -= next[c];"
  "src/nn/block.h|dx_mid[i] += dout[i];|dx_mid[i] -= dout[i];"
  "src/nn/mlp.h|dh[i] += dtmp[i];|dh[i] -= dtmp[i];"
  "src/models/transformer.h|dpe[size_t(t) * C + c] += dx|dpe[size_t(t) * C + c] -= dx"
  "src/engine/ops/rope/rope.h|base, -1.0);|base, 1.0);"
  "src/engine/ops/attention/fast.h|(dst[s] - rowdot)|(dst[s] + rowdot)"
)
status=0
for m in "${mutations[@]}"; do
  IFS='|' read -r file from to <<< "$m"
  rm -rf "$work/src" && cp -r src "$work/src"
  if ! python3 - "$work/$file" "$from" "$to" <<'PY'
import sys
path, old, new = sys.argv[1:]
text = open(path).read()
if old not in text:
    sys.exit(1)
open(path, "w").write(text.replace(old, new, 1))
PY
  then echo "PATTERN MISSING  $file: $from"; status=1; continue; fi
  if ! g++ -std=c++20 -O1 -march=native -fopenmp -I"$work/src" -Itests/unit -I/usr/include/x86_64-linux-gnu/openblas-openmp \
      tests/unit/test_model_gradcheck.cpp "$work"/src/models/build.cpp "$work"/src/config/*.cpp \
      "$work"/src/data/copy_task.cpp "$work"/src/engine/arena.cpp \
      -L/usr/lib/x86_64-linux-gnu/openblas-openmp -Wl,-rpath,/usr/lib/x86_64-linux-gnu/openblas-openmp \
      -lopenblas -ldnnl -lyaml-cpp -lgtest -lgtest_main -lpthread -o "$work/t" 2>"$work/err"; then
    echo "BUILD FAILED     $file"; status=1; continue
  fi
  failed=$(OMP_NUM_THREADS=1 "$work/t" 2>&1 | grep '^\[  FAILED  \].*\.' | sort -u | wc -l)
  if ((failed > 0)); then echo "caught ($failed failing tests)  $file: '$from' -> '$to'"
  else echo "NOT CAUGHT       $file: '$from' -> '$to'"; status=1; fi
done
exit $status
