"""canonlab from Python: train, look at and compare small language models trained with canonlab's C++ engine.

    import canonlab
    run = canonlab.train("configs/demo-induction.yaml", {"train.steps": 300}, out="runs/nb")
    run.eval_metrics                      # pandas DataFrame of every evaluation
    model = run.model()                   # the latest checkpoint, in this process
    model.attention(tokens)[1]            # layer 1's attention, (B, H, T, T)
    canonlab.Sweep("runs/sweeps/x").comparisons()   # the report's paired statistics

Run, Sweep: run and sweep directories as DataFrames. Model: logits, attention, hidden states, generation, weights.
train, sweep, resolve_config, dry_run: the CLI's commands. export_hf, import_hf: Hugging Face transformers folders.
data.show: a task's windows. Errors raise canonlab.Error with the CLI's message; a stop signal, canonlab.Stopped.
Documentation: docs/python.md."""
from . import data
from ._core import Error, Stopped
from .api import dry_run, export_hf, import_hf, resolve_config, sweep, train
from .model import Model
from .run import Run, Sweep

__all__ = ["Error", "Stopped", "Run", "Sweep", "Model", "train", "sweep", "resolve_config", "dry_run", "export_hf",
           "import_hf", "data"]
__version__ = "0.1.0"
