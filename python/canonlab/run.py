"""canonlab.Run and canonlab.Sweep: a run directory and a sweep directory, read for a notebook. Nothing here
changes the directories; they are read as `canonlab eval`, `--status` and `canonlab report` read them."""
from __future__ import annotations

import itertools
import json
import math
from os import PathLike
from pathlib import Path
from typing import Optional, Sequence, Union

import pandas as pd

from . import _core
from .model import Model


def _read_json(path: Path) -> Optional[dict]:
    return json.loads(path.read_text()) if path.is_file() else None


def read_metrics(path: Path) -> pd.DataFrame:
    """metrics.jsonl as a DataFrame, one row per record (columns step, split, loss, ... as written). A last line
    without its newline is a write a kill interrupted; it is left out, as `train --resume` does."""
    records = []
    if path.is_file():
        text = path.read_text()
        lines = text.split("\n")
        if not text.endswith("\n"):
            lines = lines[:-1]
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise _core.Error(f"metrics file '{path}' line {number} is not valid JSON: {e.msg}") from None
    frame = pd.DataFrame.from_records(records)
    if "step" in frame:
        frame["step"] = frame["step"].astype("int64")
    return frame


class Run:
    """A run directory (`canonlab train --out DIR`): its resolved config, metrics, summary and checkpoints.

    >>> run = canonlab.Run("runs/e1")
    >>> run.metrics                    # every metrics.jsonl record as a DataFrame
    >>> run.eval_metrics.plot(x="step", y="copy_acc")
    >>> run.summary["eval"]            # final metrics (summary.json)
    >>> run.model().attention(tokens)  # the latest checkpoint as a canonlab.Model
    """

    def __init__(self, path: Union[str, PathLike]):
        self.path = Path(path)
        if not self.path.is_dir():
            raise _core.Error(f"run directory '{self.path}' does not exist")
        if not (self.path / "config.resolved.yaml").is_file():
            raise _core.Error(f"'{self.path}' is not a run directory: it has no config.resolved.yaml "
                              f"(canonlab train writes one when a run starts)")

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def config(self) -> dict:
        """The resolved config (every key, defaults filled in): config.resolved.yaml."""
        import yaml

        return yaml.safe_load((self.path / "config.resolved.yaml").read_text())

    @property
    def metrics(self) -> pd.DataFrame:
        """Every record of metrics.jsonl (train and eval), one row each."""
        return read_metrics(self.path / "metrics.jsonl")

    def _split(self, split: str) -> pd.DataFrame:
        m = self.metrics
        if m.empty:
            return m
        return m[m["split"] == split].dropna(axis=1, how="all").drop(columns="split").reset_index(drop=True)

    @property
    def train_metrics(self) -> pd.DataFrame:
        """Training records: step, loss, lr, grad_norm, tokens_per_s, elapsed_s."""
        return self._split("train")

    @property
    def eval_metrics(self) -> pd.DataFrame:
        """Evaluation records: step, loss and the task's metrics (copy_acc, depo_acc_k_max, bpc, ...)."""
        return self._split("eval")

    @property
    def summary(self) -> Optional[dict]:
        """summary.json (final eval metrics, IPMR, parameters), or None while the run has not finished."""
        return _read_json(self.path / "summary.json")

    @property
    def done(self) -> bool:
        return (self.path / "summary.json").is_file()

    @property
    def checkpoints(self) -> list[Path]:
        """The .model.safetensors files of checkpoints/, oldest first."""
        return sorted((self.path / "checkpoints").glob("step_*.model.safetensors"))

    def model(self, checkpoint: Union[None, str, PathLike] = None,
              overrides: Optional[dict | Sequence[str]] = None) -> Model:
        """The latest checkpoint (or the one given) as a canonlab.Model."""
        return Model.load(checkpoint if checkpoint is not None else self.path, overrides)

    def __repr__(self) -> str:
        return f"canonlab.Run({str(self.path)!r}{'' if self.done else ', not finished'})"


class Sweep:
    """A sweep directory (`canonlab sweep FILE`): every run's final metrics as one DataFrame, and the report's
    paired comparisons (the numbers `canonlab report` prints, from the same code).

    >>> s = canonlab.Sweep("runs/sweeps/ks-placement")
    >>> s.results                                # one row per run: name, state, axis labels, final metrics
    >>> s.comparisons()                          # the report's paired tests, with the sweep file's defaults
    >>> s.comparisons(metric="copy_acc", compare=["ks=none:ks=L1"])
    """

    def __init__(self, path: Union[str, PathLike]):
        self.path = Path(path)
        self._data = json.loads(_core.sweep_results(str(self.path)))

    @property
    def name(self) -> str:
        return self._data["name"]

    @property
    def axes(self) -> dict[str, list[str]]:
        """Axis name -> its labels, in sweep order."""
        return {a["name"]: a["labels"] for a in self._data["axes"]}

    @property
    def runs(self) -> list[Run]:
        """The runs that have started (a run directory with its config), in sweep order."""
        out = []
        for r in self._data["runs"]:
            d = self.path / r["dir"]
            if (d / "config.resolved.yaml").is_file():
                out.append(Run(d))
        return out

    def run(self, name: str) -> Run:
        """One run by its name (e.g. 'ks=L1__seed=0')."""
        for r in self._data["runs"]:
            if r["name"] == name:
                return Run(self.path / r["dir"])
        raise _core.Error(f"sweep '{self.path}' has no run '{name}'; its runs: "
                          + ", ".join(r["name"] for r in self._data["runs"]))

    @property
    def results(self) -> pd.DataFrame:
        """One row per run: name, state (done, failed, running, pending), one column per axis (its label), then the
        final metrics of done runs (NaN elsewhere)."""
        rows = []
        for r in self._data["runs"]:
            row = {"name": r["name"], "state": r["state"]}
            row.update(r["axes"])
            row.update({k: (math.nan if v is None else v) for k, v in r["metrics"].items()})
            rows.append(row)
        return pd.DataFrame.from_records(rows)

    def comparisons(self, metric: str = "", pivot: str = "", compare: Sequence[str] = ()) -> pd.DataFrame:
        """The report's paired comparisons: for each section (a combination of the axes other than the pivot's)
        and pair A:B of column labels, the pairs over the row axis (seeds), mean and std of B - A, wins / losses /
        ties, the one-sided p value (B better than A; exact sign flips up to 20 pairs) and the t-test's. Defaults
        come from the sweep file's report: section, as for `canonlab report`."""
        plan = json.loads(_core.report_plan(str(self.path), metric, pivot, list(compare)))
        row, col = plan["row"], plan["col"]
        sign = 1.0 if plan["higher_is_better"] else -1.0
        sections = [a["name"] for a in plan["sections"]]
        values: dict[tuple, float] = {}
        for r in self._data["runs"]:
            v = r["metrics"].get(plan["metric"]) if r["state"] == "done" else None
            key = (tuple(r["axes"].get(s) for s in sections), r["axes"].get(row["name"]),
                   r["axes"].get(col["name"], col["labels"][0] if len(col["labels"]) == 1 else None))
            values[key] = math.nan if v is None else float(v)
        records = []
        for labels in itertools.product(*[a["labels"] for a in plan["sections"]]):
            for a_label, b_label in plan["compare"]:
                a = [sign * values.get((labels, rl, a_label), math.nan) for rl in row["labels"]]
                b = [sign * values.get((labels, rl, b_label), math.nan) for rl in row["labels"]]
                pc = _core.compare_paired(a, b)
                rec = dict(zip(sections, labels))
                rec.update({"metric": plan["metric"], "A": f"{col['name']}={a_label}", "B": f"{col['name']}={b_label}"})
                pc["mean_delta"] = sign * pc["mean_delta"]  # B - A in the metric's own units
                rec.update(pc)
                records.append(rec)
        return pd.DataFrame.from_records(records)

    def __repr__(self) -> str:
        states = pd.Series([r["state"] for r in self._data["runs"]]).value_counts().to_dict()
        return f"canonlab.Sweep({str(self.path)!r}, {len(self._data['runs'])} runs: {states})"
