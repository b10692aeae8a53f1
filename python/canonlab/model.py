"""canonlab.Model: a trained model read back from a checkpoint, in this process (the C++ engine, no copy of it in
Python). Tokens go in as anything NumPy can read as integers, shaped (B, T) or (T,); results are NumPy arrays that
own their memory (torch.from_numpy / torch.from_dlpack take them without a copy)."""
from __future__ import annotations

import json
from os import PathLike
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

import numpy as np

from . import _core

if TYPE_CHECKING:
    from .run import Run

Tokens = Union[Sequence[int], Sequence[Sequence[int]], np.ndarray, Any]


def _batch(tokens: Tokens) -> np.ndarray:
    if hasattr(tokens, "detach"):  # a torch tensor
        tokens = tokens.detach().cpu().numpy()
    array = np.asarray(tokens)
    if array.dtype.kind not in "iu":
        raise _core.Error(f"tokens: dtype {array.dtype} is not allowed; expected integer token ids")
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2:
        raise _core.Error(f"tokens: {array.ndim} dimensions (shape {array.shape}); expected (T,) or (B, T)")
    return np.ascontiguousarray(array, dtype=np.int64)


class Model:
    """A trained model: its config, logits, attention maps, residual stream, generation and weights.

    >>> m = canonlab.Model.load("runs/e1")          # a run directory, checkpoints/ or a .model.safetensors file
    >>> logits = m.forward([[64, 3, 7, 1]])        # (B, T, V) float32
    >>> maps = m.attention(tokens)                  # per layer (B, H, T, T), None for a layer without attention
    >>> h = m.hidden_states(tokens)                 # L + 1 arrays (B, T, C): after the embedding, after each block
    >>> m.generate([64, 3, 7], max_new=8)           # greedy continuation, as `canonlab generate`
    >>> sd = m.state_dict()                         # name -> torch.Tensor sharing the model's memory
    >>> batch = m.eval_batch(0)                     # a held-out batch of its task: tokens, targets, masks
    """

    def __init__(self, core: "_core.Model"):
        self._core = core
        self.config: dict = json.loads(core.config_json)
        """The resolved config the model was trained with (every key, as config.resolved.yaml)."""

    @classmethod
    def load(cls, where: Union[str, PathLike, "Run"], overrides: Optional[dict | Sequence[str]] = None) -> "Model":
        """Loads the latest checkpoint of a run directory (or a checkpoints/ directory, or one .model.safetensors
        file). `overrides` change how the model is evaluated (task.*, train.*, probe.* keys, as eval's --set);
        model.* keys are refused: the weights fix the model."""
        from .api import override_strings

        path = str(getattr(where, "path", where))
        return cls(_core.Model.load(path, override_strings(overrides)))

    @property
    def path(self) -> str:
        """The .model.safetensors file the weights came from."""
        return self._core.path

    @property
    def step(self) -> int:
        """Training steps completed when the checkpoint was written."""
        return self._core.step

    @property
    def vocab_size(self) -> int:
        return int(self.config["model"]["vocab_size"])

    @property
    def n_layers(self) -> int:
        return int(self.config["model"]["n_layers"])

    def forward(self, tokens: Tokens) -> np.ndarray:
        """Logits (B, T, V) float32 for tokens (B, T) (a (T,) input is one row: B = 1)."""
        return self._core.run(_batch(tokens), logits=True)["logits"]

    __call__ = forward

    def attention(self, tokens: Tokens) -> list[Optional[np.ndarray]]:
        """Per layer, the softmax attention probabilities (B, H, T, T): row = query position, column = key position,
        zero above the diagonal. None for a layer that has no softmax attention (a linear mixer)."""
        return self._core.run(_batch(tokens), logits=False, attention=True)["attention"]

    def hidden_states(self, tokens: Tokens) -> list[np.ndarray]:
        """The residual stream, n_layers + 1 arrays (B, T, d_model): after the embedding, then after each block
        (cross-layer Canon included), before the final norm."""
        return self._core.run(_batch(tokens), logits=False, hidden_states=True)["hidden_states"]

    def run(self, tokens: Tokens, *, attention: bool = False, hidden_states: bool = False) -> dict:
        """One forward pass giving {"logits"} plus "attention" and "hidden_states" when asked for."""
        return self._core.run(_batch(tokens), logits=True, attention=attention, hidden_states=hidden_states)

    def generate(self, prompt: Union[Sequence[int], Sequence[Sequence[int]]], max_new: int = 32, *,
                 temperature: float = 0.0, top_k: int = 0, seed: int = 0, recompute: bool = False):
        """Continues a prompt (token ids) by up to max_new tokens (fewer where the context ends): greedy at
        temperature 0, else sampled (top_k > 0 keeps the k largest logits) from the counter-based stream of `seed`.
        A list of prompts gives a list of continuations. Cached decoding unless recompute=True (the reference)."""
        if hasattr(prompt, "tolist"):
            prompt = prompt.tolist()
        many = len(prompt) > 0 and not isinstance(prompt[0], (int, np.integer))
        prompts = [list(map(int, p)) for p in prompt] if many else [list(map(int, prompt))]
        out = self._core.generate(prompts, max_new, float(temperature), int(top_k), int(seed), bool(recompute))
        return out if many else out[0]

    def eval_batch(self, index: int = 0) -> dict:
        """The index-th held-out evaluation batch of the model's task (the batches its eval metrics come from):
        {"tokens", "targets", "loss_mask", "score_mask"} arrays (B, T) and "suite" (e.g. Depo's "k_max")."""
        return self._core.eval_batch(int(index))

    def decode(self, tokens) -> list[str]:
        """How the task writes each token id (e.g. 's12', '<bos>', a text piece)."""
        return [self._core.token_text(int(t)) for t in np.asarray(tokens).reshape(-1)]

    def state_dict(self, as_torch: bool = True) -> dict:
        """The weights under the checkpoint's names (docs/checkpoint-format.md), as torch tensors (as_torch, the
        default) or NumPy arrays. Both share the model's memory: no copy, and writing to them changes the model."""
        arrays = self._core.weights()
        if not as_torch:
            return arrays
        import torch

        return {name: torch.from_numpy(a) for name, a in arrays.items()}

    def __repr__(self) -> str:
        m = self.config["model"]
        return (f"canonlab.Model({self.path!r}, step {self.step}: {m['family']} {m['n_layers']}L d{m['d_model']} "
                f"{m['n_heads']}H, vocab {m['vocab_size']})")
