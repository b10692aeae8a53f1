#!/usr/bin/env bash
# Installs the GEMM libraries that bench/gemm_libraries.py compares with what canonlab already uses (oneDNN's
# dnnl_sgemm and OpenBLAS, both from scripts/install-deps.sh), only those missing:
#   - BLIS 0.9.0, Debian's OpenMP build (libblis4-openmp: /usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4, with
#     its CBLAS). Only the run-time library: the benchmark dlopen()s it and needs no header. Debian registers it as
#     an alternative for libblas.so.3 at a lower priority than openblas-openmp, so the system BLAS stays OpenBLAS
#     (and canonlab links OpenBLAS by its own path anyway); this script checks that.
#   - Intel oneMKL from PyPI (the `mkl` wheel, with its dependencies intel-openmp and tbb) into <repo>/.venv
#     (CANONLAB_VENV overrides it; created with python3 -m venv when missing): libmkl_rt.so.3 and
#     libmkl_gnu_thread.so.3 in .venv/lib (.so.2 before oneMKL 2025). oneMKL is proprietary, free to use and redistribute under the Intel
#     Simplified Software License (the wheel's LICENSE.txt), not an open-source licence.
# Idempotent: what is already there is left alone. apt needs root or sudo; pip does not.
#
#   scripts/install-gemm-candidates.sh            # both
#   scripts/install-gemm-candidates.sh --no-mkl   # BLIS only (apt), nothing from PyPI
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${CANONLAB_VENV:-$ROOT/.venv}"
WITH_MKL=1
[[ "${1:-}" == "--no-mkl" ]] && WITH_MKL=0

# --- BLIS (OpenMP variant), from Debian -----------------------------------------------------------------------
packages=(libblis4-openmp)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  blas_before="$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || true)"
  echo "install-gemm-candidates: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
  blas_after="$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || true)"
  if [[ "$blas_before" != "$blas_after" ]]; then
    echo "install-gemm-candidates: note: the system libblas.so.3 moved from $blas_before to $blas_after" \
         "(update-alternatives --config libblas.so.3-x86_64-linux-gnu sets it back)" >&2
  fi
else
  echo "install-gemm-candidates: ${packages[*]} already installed"
fi

# --- oneMKL, from PyPI into the project's virtualenv -----------------------------------------------------------
if ((WITH_MKL)); then
  PY="$VENV/bin/python"
  if [[ ! -x "$PY" ]]; then
    echo "install-gemm-candidates: creating $VENV"
    python3 -m venv "$VENV" || { echo "install-gemm-candidates: python3 -m venv failed (apt-get install python3-venv)" >&2; exit 1; }
  fi
  if compgen -G "$VENV/lib/libmkl_rt.so*" >/dev/null && "$PY" -m pip show -q mkl >/dev/null 2>&1; then
    echo "install-gemm-candidates: mkl $("$PY" -m pip show mkl 2>/dev/null | sed -n 's/^Version: //p') already in $VENV"
  else
    echo "install-gemm-candidates: pip install mkl into $VENV (about 0.5 GB installed)"
    "$PY" -m pip install --disable-pip-version-check --no-input mkl
  fi
fi
