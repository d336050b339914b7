"""Where the `trl-grpo` target records the log-probs and entropies of TRL's loss: the entry points the installed
trainer module has, found by name.

TRL's releases compute them in three ways, and the module says which by what it has:

- `add_fused_lm_head` (TRL 1.15 and later): `_get_per_token_logps_and_entropies` calls the model with a fused LM
  head, whose forward projects the hidden states through the head inside `_ChunkedLogProbFunction.apply(hidden,
  weight, bias, targets, temperature, ...)` (a name of the module that defines `add_fused_lm_head`), and no logits
  are made: the recorder keeps the gaps at that boundary ("head");
- `selective_log_softmax_and_entropy(logits, index, entropy_requires_grad, temperature, row_mask)` (TRL 1.14): one
  function of the unscaled logits ("joint");
- `selective_log_softmax(logits, index)` and `entropy_from_logits(logits)` (TRL 1.12 and 1.13), of the
  temperature-scaled logits ("log_softmax", "entropy").

A module with none of them, or whose fused head's function is missing (TRL 1.15.0 sets it to None where triton
is not installed), is a HarnessConfigError naming the installed release and what is missing.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from typing import Any

from harness.errors import HarnessConfigError
from harness.targets.hf import trl_release

TRAINER_METHODS = ("_compute_loss", "_get_per_token_logps_and_entropies", "_generate_and_score_completions")
"""The methods of `GRPOTrainer` the recorder wraps."""
HEAD_FUNCTION = "_ChunkedLogProbFunction"
"""The fused head's autograd function, a name of the module that defines `add_fused_lm_head`."""


def _where(module: types.ModuleType) -> str:
    """The module, and the installed release, for a message."""
    installed = trl_release()
    return f"{module.__name__} ({f'trl {installed}' if installed else 'no trl distribution installed'})"


@dataclass(frozen=True)
class EntryPoints:
    """The functions the recorder compares with their float64 formulas, as `LossRecorder`'s `logits` takes them."""

    way: str
    """"head", "joint" or "logits" (module docstring)."""
    logits: tuple[tuple[Any, str, str], ...]


def entry_points(module: types.ModuleType) -> EntryPoints:
    """The entry points of the trainer module `module` (module docstring); HarnessConfigError when it has none the
    recorder can hold, or its trainer lacks a method the recorder wraps."""
    trainer = module.GRPOTrainer
    lacking = [name for name in TRAINER_METHODS if not callable(getattr(trainer, name, None))]
    if lacking:
        raise HarnessConfigError(
            f"trl-grpo target: {_where(module)}: GRPOTrainer has no {', '.join(lacking)}, which the adapter records "
            f"the loss at"
        )
    fused = getattr(module, "add_fused_lm_head", None)
    if callable(fused):
        return EntryPoints("head", ((_head_function(module, fused), "apply", "head"),))
    if callable(getattr(module, "selective_log_softmax_and_entropy", None)):
        return EntryPoints("joint", ((module, "selective_log_softmax_and_entropy", "joint"),))
    split = ("selective_log_softmax", "entropy_from_logits")
    if all(callable(getattr(module, name, None)) for name in split):
        return EntryPoints("logits", ((module, split[0], "log_softmax"), (module, split[1], "entropy")))
    raise HarnessConfigError(
        f"trl-grpo target: {_where(module)} has none of the functions the adapter records log-probs and entropies "
        f"at: add_fused_lm_head (TRL 1.15 and later), selective_log_softmax_and_entropy (1.14), or "
        f"selective_log_softmax and entropy_from_logits (1.12, 1.13)"
    )


def _head_function(module: types.ModuleType, fused: Any) -> Any:
    """The autograd function the fused head of `add_fused_lm_head` calls (looked up in its own module)."""
    home = sys.modules.get(getattr(fused, "__module__", ""), None)
    function = getattr(home, HEAD_FUNCTION, None) if home is not None else None
    if function is None and home is not None and HEAD_FUNCTION in vars(home):
        raise HarnessConfigError(
            f"trl-grpo target: {_where(module)} computes GRPO's log-probs with a Triton kernel, and "
            f"{home.__name__}.{HEAD_FUNCTION} is None: this release needs triton (a CUDA machine) to train GRPO"
        )
    if not callable(getattr(function, "apply", None)):
        raise HarnessConfigError(
            f"trl-grpo target: {_where(module)} has add_fused_lm_head, but its module "
            f"{getattr(home, '__name__', '?')} has no {HEAD_FUNCTION}.apply, where the adapter records the fused "
            f"head's log-probs and entropies"
        )
    return function
