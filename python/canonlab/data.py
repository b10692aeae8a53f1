"""canonlab.data: look at a task's windows as `canonlab data show` prints them."""
from __future__ import annotations

from os import PathLike
from typing import Optional, Union

from . import _cli
from .api import Overrides, override_strings


def show(task: Union[str, PathLike], overrides: Overrides = None, *, n: Optional[int] = None,
         eval: Optional[str] = None, seed: Optional[int] = None, tokens: Optional[int] = None,
         width: Optional[int] = None) -> str:
    """Decoded windows of a task (copy, depo, brevo, mano, lano, capo, mqar, text) or of a config's task, with the
    loss mask marked: [tok] is trained on, {tok} also scored. Returns the text `canonlab data show` prints."""
    args = ["data", "show", str(task)]
    for s in override_strings(overrides):
        args += ["--set", s]
    for flag, value in (("--n", n), ("--eval", eval), ("--seed", seed), ("--tokens", tokens), ("--width", width)):
        if value is not None:
            args += [flag, str(value)]
    return _cli.run(args)
