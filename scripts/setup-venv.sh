#!/usr/bin/env bash
# Creates the Python environment for the PyTorch parity tests and benchmarks: <repo>/.venv with torch,
# numpy, safetensors, pyyaml, transformers, pandas, matplotlib, nbclient and the Python package's build tools
# (tests/torch_ref/requirements.txt), from PyPI. scripts/install-python.sh then installs the package canonlab into it.
#
#   scripts/setup-venv.sh            # idempotent: does nothing when .venv already satisfies the requirements
#   scripts/setup-venv.sh --force    # reinstall the requirements
#
# Needs python3 with the venv module (Debian: apt-get install python3-venv; this script installs no system
# packages). The default Linux torch wheel pulls NVIDIA CUDA libraries: about 3 GB to download and 5.5 GB
# installed; pip's cache (~/.cache/pip) makes a second install on the same machine much faster.
# CANONLAB_VENV overrides the location (the CMake test uses <repo>/.venv unless CANONLAB_PYTHON is set).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${CANONLAB_VENV:-$ROOT/.venv}"
REQ="$ROOT/tests/torch_ref/requirements.txt"
MARKER="$VENV/.canonlab-requirements.sha256"
FORCE=0
[[ "${1:-}" == "--force" ]] && FORCE=1

command -v python3 >/dev/null || { echo "setup-venv: python3 not found" >&2; exit 1; }
# Installed without their dependencies: cuDNN's header-only frontend (its headers land in site-packages/include, where
# the CUDA build finds them to compile the cuDNN attention path, src/engine/cuda/CMakeLists.txt); its declared
# dependencies (CUTLASS's Python DSL, about 500 MB) are for its Python API, which nothing here uses.
NO_DEPS=(nvidia-cudnn-frontend==1.32.0)
# The marker covers the requirements, the interpreter and NO_DEPS, so changing any of them reinstalls.
WANT="$( { cat "$REQ"; python3 --version; echo "${NO_DEPS[@]}"; } | sha256sum | cut -d' ' -f1)"
PY="$VENV/bin/python"

if [[ $FORCE == 0 && -x "$PY" && -f "$MARKER" && "$(cat "$MARKER")" == "$WANT" ]] &&
   "$PY" -c "import torch, numpy, safetensors, yaml, transformers, pandas, nbclient, nanobind, scikit_build_core, tensorboard" 2>/dev/null; then
  echo "setup-venv: $VENV is up to date ($("$PY" -c 'import torch; print("torch", torch.__version__)'))"
  exit 0
fi

if [[ ! -x "$PY" ]] || ! "$PY" -c "import sys" 2>/dev/null; then
  echo "setup-venv: creating $VENV"
  rm -rf "$VENV"
  if ! python3 -m venv "$VENV"; then
    echo "setup-venv: 'python3 -m venv' failed; on Debian install the python3-venv package first" >&2
    rm -rf "$VENV"
    exit 1
  fi
fi

rm -f "$MARKER"
echo "setup-venv: installing $(grep -v '^#' "$REQ" | xargs) (torch's CUDA dependencies make this a few GB)"
"$PY" -m pip install --disable-pip-version-check --no-input --upgrade pip
"$PY" -m pip install --disable-pip-version-check --no-input -r "$REQ"
"$PY" -m pip install --disable-pip-version-check --no-input --no-deps "${NO_DEPS[@]}"
"$PY" -c "import torch, numpy, safetensors, yaml; print('setup-venv: torch', torch.__version__, '| numpy', numpy.__version__, '| safetensors', safetensors.__version__, '| pyyaml', yaml.__version__)"
echo "$WANT" > "$MARKER"
