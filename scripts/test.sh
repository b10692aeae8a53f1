#!/usr/bin/env bash
# Quick start, part 2: install what is missing, build, prepare the test virtualenv (PyTorch, transformers) with the
# Python package canonlab in it, run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# .venv first: the CUDA build compiles cuDNN's attention path against the cuDNN frontend's headers it holds
scripts/setup-venv.sh
scripts/build.sh
scripts/install-python.sh
# The libFuzzer targets are a clang build of their own (ASan + UBSan); building them here, before ctest, keeps a
# build out of the test time. ctest's fuzz_build then finds them up to date (and skips them without clang: exit 77).
status=0
scripts/fuzz.sh --build-only --build-dir build/tests/fuzz || status=$?
((status == 0 || status == 77)) || exit "$status"
cd build
ctest --output-on-failure -j 2 "$@"
