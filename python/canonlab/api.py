"""canonlab.train, canonlab.sweep, canonlab.export_hf, canonlab.import_hf: the CLI's commands from Python, with
the CLI's behaviour and its error messages (canonlab.Error carries the text `canonlab` prints after "error:")."""
from __future__ import annotations

import json
import sys
from os import PathLike
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence, Union

from . import _cli, _core
from .run import Run, Sweep

Config = Union[str, PathLike, Mapping]
Overrides = Optional[Union[Mapping[str, object], Sequence[str]]]


def _yaml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value)  # JSON is YAML
    return str(value)


def override_strings(overrides: Overrides) -> list[str]:
    """{"model.canon.set": "ABCD", "train.steps": 300} or ["model.canon.set=ABCD", ...] -> --set strings."""
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        return [f"{key}={_yaml_value(value)}" for key, value in overrides.items()]
    if isinstance(overrides, str):
        raise _core.Error(f"overrides: '{overrides}' is one string; give a dict or a list of 'key=value' strings")
    return [str(o) for o in overrides]


def _config_args(config: Config) -> tuple[Optional[str], Optional[str]]:
    if isinstance(config, Mapping):
        return None, json.dumps(config)
    path = Path(config)
    if not path.is_file():
        raise _core.Error(f"config file '{path}' does not exist")
    return str(path), None


def resolve_config(config: Config, overrides: Overrides = None) -> dict:
    """The resolved config (every key, defaults filled in, validated) of a YAML file or a dict, with overrides."""
    path, text = _config_args(config)
    return json.loads(_core.resolve_config(path, text, override_strings(overrides)))


def dry_run(config: Config, overrides: Overrides = None) -> str:
    """What `canonlab train CONFIG --dry-run` prints: memory by item, parameters, FLOPs, estimated time. A config
    that would not fit raises canonlab.Error, as the dry run exits 2."""
    path, text = _config_args(config)
    return _core.dry_run(path, text, override_strings(overrides))


def train(config: Config, overrides: Overrides = None, out: Union[None, str, PathLike] = None, *,
          resume: bool = False, force: bool = False, progress: Optional[bool] = None,
          on_step: Optional[Callable[[dict], None]] = None) -> Run:
    """Trains as `canonlab train CONFIG --set K=V ... --out OUT`, in this process (the GIL is released), and returns
    the finished canonlab.Run.

    config: a YAML file or a dict of the same keys (a dict's `base:` is relative to the current directory).
    overrides: {"train.steps": 300, "model.canon.set": "ABCD"} or ["train.steps=300", ...].
    out: the run directory; default runs/<config file's stem> (required for a dict).
    resume / force: as --resume / --force. progress: the progress bar on stderr (default: when stderr is a terminal).
    on_step(record): called with every metrics record as it is written ({"step", "split": "train", "loss", "lr",
      ...} every train.log_every steps, {"split": "eval", ...} at each evaluation); raising in it stops the run
      (its latest checkpoint stays resumable).
    Ctrl-C (SIGINT), SIGTERM or SIGUSR1 stop the run after the step in progress with a checkpoint and raise
    canonlab.Stopped; resume=True continues bit-exactly."""
    path, text = _config_args(config)
    if out is None:
        if path is None:
            raise _core.Error("out: a config given as a dict needs a run directory (out=...)")
        out = Path("runs") / Path(path).stem
    if progress is None:
        progress = sys.stderr.isatty()
    callback = None
    if on_step is not None:
        def callback(record_json: str) -> None:
            on_step(json.loads(record_json))
    _core.train(path, text, override_strings(overrides), str(out), resume, force, bool(progress), callback)
    return Run(out)


def sweep(sweep_file: Union[str, PathLike], *, out: Union[None, str, PathLike] = None, jobs: Optional[int] = None,
          threads_per_run: Optional[int] = None, pack: Union[None, int, str] = None, force: bool = False) -> Sweep:
    """Runs a sweep as `canonlab sweep FILE` (one process per run, or with pack=N or "auto" packs of runs that
    share their shapes, each run with the bits it has alone; its progress is echoed here) and returns the
    canonlab.Sweep. A finished sweep is not retrained: run again, it only trains what is missing."""
    args = ["sweep", str(sweep_file)]
    if out is not None:
        args += ["--out", str(out)]
    if jobs is not None:
        args += ["--jobs", str(jobs)]
    if threads_per_run is not None:
        args += ["--threads-per-run", str(threads_per_run)]
    if pack is not None:
        args += ["--pack", str(pack)]
    if force:
        args.append("--force")
    _cli.run_streaming(args)
    if out is None:
        import yaml

        spec = yaml.safe_load(Path(sweep_file).read_text()) or {}
        out = Path("runs") / "sweeps" / str(spec.get("name") or Path(sweep_file).stem)
    return Sweep(out)


def export_hf(run: Union[str, PathLike, Run], out: Union[str, PathLike], *, force: bool = False) -> Path:
    """`canonlab export RUN --to hf --out OUT`: config.json + model.safetensors that transformers loads (stock
    LlamaForCausalLM, or the LlamaCanon / GLACanon / GatedDeltaNetCanon / Mamba2Canon formats of PhysicsLM4's release,
    with canonlab's model code beside the weights for AutoModelForCausalLM.from_pretrained(OUT, trust_remote_code=True);
    docs/huggingface.md). Options with no counterpart raise canonlab.Error naming the key."""
    args = ["export", str(getattr(run, "path", run)), "--to", "hf", "--out", str(out)]
    if force:
        args.append("--force")
    _cli.run(args)
    return Path(out)


def import_hf(folder: Union[str, PathLike], out: Union[str, PathLike], overrides: Overrides = None) -> Run:
    """`canonlab import-hf FOLDER --out OUT`: a transformers Llama / LlamaCanon folder becomes a canonlab run
    directory, so Model.load, eval and probes work on it; overrides set the task it is evaluated on."""
    args = ["import-hf", str(folder), "--out", str(out)]
    for s in override_strings(overrides):
        args += ["--set", s]
    _cli.run(args)
    return Run(out)
