#!/usr/bin/env python3
"""Runs a notebook top to bottom in a fresh kernel of this Python (nbclient), so docs/notebooks/ cannot rot: any
cell that raises fails the test with the cell and its error. The executed copy is written to --workdir.

    .venv/bin/python tests/python/test_notebook.py docs/notebooks/quickstart.ipynb --workdir /tmp/nb
"""
import argparse
import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("notebook")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    args = parser.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    nb = nbformat.read(args.notebook, as_version=4)
    os.environ["CANONLAB_NOTEBOOK_RUNS"] = str((work / "runs").resolve())  # the kernel inherits it
    # Kernel "python3" is the virtualenv's own (ipykernel's spec starts "python", which jupyter_client runs as
    # this interpreter), so the notebook imports the package installed there.
    client = NotebookClient(nb, timeout=args.timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(Path(args.notebook).resolve().parent)}})
    try:
        client.execute()
    except CellExecutionError as e:
        out = work / Path(args.notebook).name
        nbformat.write(nb, out)
        print(f"FAIL: {args.notebook}: a cell raised (executed copy: {out})\n{e}", file=sys.stderr)
        return 1
    out = work / Path(args.notebook).name
    nbformat.write(nb, out)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    if errors:
        print(f"FAIL: {len(errors)} error outputs", file=sys.stderr)
        return 1
    images = sum(1 for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                 if "image/png" in o.get("data", {}))
    print(f"ok: {args.notebook}: {sum(c.cell_type == 'code' for c in nb.cells)} code cells ran, {images} pictures; "
          f"executed copy: {out}")
    return 0 if images >= 2 else 1


if __name__ == "__main__":
    sys.exit(main())
