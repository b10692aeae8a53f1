#!/usr/bin/env bash
# Installs the Python package canonlab (python/canonlab over the C++ engine; pyproject.toml, docs/python.md) into
# the project's virtualenv, <repo>/.venv (CANONLAB_VENV overrides it), creating the virtualenv when it is missing:
#
#   scripts/install-python.sh        # then: .venv/bin/python -c "import canonlab; help(canonlab)"
#
# It is `pip install --no-build-isolation .` with the build tools (scikit-build-core, nanobind) and the package's
# own dependencies (numpy, pandas, pyyaml) from PyPI; torch and transformers, which only some functions need, come
# with scripts/setup-venv.sh. The build folder build/python stays, so a second run compiles only what changed (the
# first compiles the engine once more, position-independent, in about 4 minutes on 2 cores). Needs python3-venv and
# python3-dev (scripts/install-deps.sh installs both).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${CANONLAB_VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"

if [[ ! -x "$PY" ]] || ! "$PY" -c "import sys" 2>/dev/null; then
  echo "install-python: creating $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV" || { echo "install-python: 'python3 -m venv' failed; install python3-venv" >&2; exit 1; }
fi
if ! "$PY" -c "import scikit_build_core, nanobind, numpy, pandas, yaml" 2>/dev/null; then
  echo "install-python: installing the build tools and the package's dependencies from PyPI"
  "$PY" -m pip install --disable-pip-version-check --no-input -q --upgrade pip
  "$PY" -m pip install --disable-pip-version-check --no-input -q "scikit-build-core>=0.10" "nanobind>=2.4" \
    "numpy>=1.24" "pandas>=2.0" "pyyaml>=6.0"
fi
"$PY" -m pip install --disable-pip-version-check --no-input -q --no-build-isolation "$ROOT"
# From another folder, so the import finds the installed package and not python/ of the checkout.
(cd / && "$PY" -c "import canonlab, sys; print('install-python: canonlab', canonlab.__version__, 'for', sys.executable)")
