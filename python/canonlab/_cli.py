"""The canonlab command line shipped inside the package (canonlab/bin/canonlab), for the calls that are processes
anyway (a sweep starts one per run) or print what the CLI prints (data show, export, import-hf).

Errors come back as the CLI gives them: exit status 2 with "error: MESSAGE" on stderr raises canonlab.Error(MESSAGE),
exit status 75 (stopped by a signal after a checkpoint) raises canonlab.Stopped."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from . import _core

EXIT_STOPPED_BY_SIGNAL = 75


def executable() -> str:
    """The canonlab binary built with this package (CANONLAB_EXECUTABLE overrides it)."""
    override = os.environ.get("CANONLAB_EXECUTABLE")
    path = Path(override) if override else Path(__file__).resolve().parent / "bin" / "canonlab"
    if not path.is_file():
        raise _core.Error(f"the canonlab binary '{path}' is missing (reinstall the package: pip install .)")
    return str(path)


def _raise_for(args: list[str], code: int, stderr_lines: list[str]) -> None:
    messages = [line[len("error: "):] for line in stderr_lines if line.startswith("error: ")]
    if code == EXIT_STOPPED_BY_SIGNAL:
        raise _core.Stopped("".join(stderr_lines).strip() or f"canonlab {args[0]} was stopped by a signal")
    if messages:
        raise _core.Error("\n".join(m.rstrip("\n") for m in messages))
    tail = "".join(stderr_lines[-5:]).strip()
    raise _core.Error(f"canonlab {' '.join(args)} exited with status {code}" + (f": {tail}" if tail else ""))


def run(args: list[str]) -> str:
    """Runs `canonlab ARGS...`, returns its standard output; raises canonlab.Error on failure."""
    done = subprocess.run([executable(), *args], capture_output=True, text=True)
    if done.returncode != 0:
        _raise_for(args, done.returncode, done.stderr.splitlines(keepends=True))
    return done.stdout


def run_streaming(args: list[str]) -> None:
    """Runs `canonlab ARGS...` and echoes its output as it comes (a notebook cell shows it), through Python's
    sys.stdout; stderr is echoed too and kept for the error message."""
    lines: list[str] = []
    with subprocess.Popen([executable(), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          bufsize=1) as proc:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                lines.append(line)
                sys.stdout.write(line)
                sys.stdout.flush()
        except KeyboardInterrupt:
            proc.terminate()  # the CLI stops its runs with checkpoints and exits 143
            proc.wait()
            raise
        code = proc.wait()
    if code != 0:
        _raise_for(args, code, lines)
