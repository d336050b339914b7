"""What the TRL adapters (`trl`, `trl-grpo`) share: the pinned TRL version, importing a trainer module by name,
the number of processes, silencing the Hugging Face libraries, and a callback that keeps the logged metrics.

A target module (it imports `transformers` where it is used); nothing outside a `targets/` folder imports it.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import io
import logging
import os
import sys
import types
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from harness.errors import HarnessConfigError

TRL_VERSION = "1.12.0"
"""The TRL release the `trl-ppo` extra installs, the last with a PPOTrainer, whose verdicts the tests pin
(docs/trl.md, docs/trl-grpo.md)."""
TRL_NEWEST = "1.16.0"
"""The TRL release the `trl` extra installs, whose GRPO verdict `baselines/trl-1.16.0-grpo.toml` holds."""
INSTALL = {
    "trl": f"trl=={TRL_VERSION}: pip install 'ppo-stats-harness[trl-ppo]'",
    "trl-grpo": f"trl (1.12.0 or later; the `trl` extra installs {TRL_NEWEST}): pip install 'ppo-stats-harness[trl]'",
}
"""What each TRL adapter needs, and the extra that installs it, for the message when TRL cannot be imported."""


def trl_release() -> str | None:
    """The version of the installed `trl` distribution (None when there is none)."""
    try:
        return importlib.metadata.version("trl")
    except importlib.metadata.PackageNotFoundError:
        return None


def import_trainer_module(
    module: str | None, default: str, names: Sequence[str], target: str, absent: str | None = None
) -> types.ModuleType:
    """The trainer module `module` (TRL's own, `default`, when None), after checking it has each of `names` as a
    callable; HarnessConfigError (naming the `target`) when it cannot be imported or lacks one. `absent`: what to
    say, after the installed release, when TRL is installed and has no module `default` (a release without it)."""
    name = module or default
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = importlib.import_module(name)
    except ImportError as exc:  # trl missing (or a dependency its import needs), or no such module
        missing = getattr(exc, "name", None) or ""
        installed = trl_release()
        # TRL itself imports, and the module `default` is absent from it (a release without it)
        release_lacks_it = isinstance(sys.modules.get("trl"), types.ModuleType) and missing.startswith("trl.")
        if module is None and absent and installed and release_lacks_it and default.startswith(missing):
            raise HarnessConfigError(f"{target} target: trl {installed} is installed, {absent}") from None
        if module is None:
            raise HarnessConfigError(f"{target} target needs {INSTALL[target]} ({exc})") from exc
        raise HarnessConfigError(f"{target} target: cannot import {module!r} ({exc})") from exc
    missing = [n for n in names if not callable(getattr(trainer, n, None))]
    if missing:
        raise HarnessConfigError(
            f"{target} target: module {name!r} has no {', '.join(missing)} (it needs the names of {default})"
        )
    return trainer


def world_size() -> int:
    """Processes launched for this run (torchrun / accelerate launch set WORLD_SIZE)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


@contextlib.contextmanager
def quiet():
    """Silence TRL's prints, transformers/accelerate info logs and Python warnings."""
    from transformers.utils import logging as hf_logging

    previous = hf_logging.get_verbosity()
    accelerate_logger = logging.getLogger("accelerate")
    previous_accelerate = accelerate_logger.level
    hf_logging.set_verbosity_error()
    accelerate_logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(previous)
        accelerate_logger.setLevel(previous_accelerate)


def metrics_callback(sink: list[dict[str, float]], entry: Callable[[Mapping[str, Any], Any], dict | None]):
    """A transformers `TrainerCallback` that appends `entry(logs, state)` to `sink` at each non-empty `log` call
    (nothing when it is None)."""
    from transformers import TrainerCallback

    class _Capture(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs:
                kept = entry(logs, state)
                if kept is not None:
                    sink.append(kept)

    return _Capture()
