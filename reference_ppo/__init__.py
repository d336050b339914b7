"""The reference trainers' earlier package name: each of its modules IS a module of `reference_trainers`.

`import reference_ppo.trainer` gives the module `reference_trainers.ppo` itself, not a copy, so
what is patched on the one is patched on the other; `reference_ppo.config` is
`reference_trainers.ppo_config`, and `reference_ppo.grpo`, `.grpo_config` and `.toy` are their
namesakes. `from reference_ppo import PPOConfig, PPOTrainer` works as before. Nothing but
`reference_trainers`' configurations loads until a module is asked for (no torch).

Deprecated since 0.3.0: importing it warns once (a DeprecationWarning naming `reference_trainers`). It keeps
working; it is removed only in a release whose CHANGELOG.md says so.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

from reference_trainers import ConfigError, PPOConfig, exact_div

ALIASES = {"trainer": "ppo", "config": "ppo_config", "grpo": "grpo", "grpo_config": "grpo_config", "toy": "toy"}
"""Each module of this package -> the module of `reference_trainers` it is."""

__all__ = ["ConfigError", "PPOConfig", "PPOTrainer", "exact_div"]


class AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds `reference_ppo.<name>` for each name of ALIASES, and loads it as the module of reference_trainers."""

    def find_spec(self, fullname, path=None, target=None):
        """A spec loaded by this finder for an alias; None for every other module."""
        package, _, name = fullname.rpartition(".")
        if package != __name__ or name not in ALIASES:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        """The module of reference_trainers itself (imported under its own name), entered under the alias."""
        return importlib.import_module(f"reference_trainers.{ALIASES[spec.name.rpartition('.')[2]]}")

    def exec_module(self, module) -> None:
        """Nothing to run: the module ran when it was imported under its own name."""


DEPRECATED = (
    "reference_ppo is deprecated since ppo-stats-harness 0.3.0: import reference_trainers instead "
    "(reference_ppo.trainer is reference_trainers.ppo, reference_ppo.config is reference_trainers.ppo_config; "
    ".grpo, .grpo_config and .toy keep their names); it keeps working until a release whose CHANGELOG.md removes it"
)



# stacklevel 2: the statement that imported it (warnings skips the import machinery's frames)
warnings.warn(DEPRECATED, DeprecationWarning, stacklevel=2)

if not any(type(finder).__name__ == AliasFinder.__name__ for finder in sys.meta_path):
    sys.meta_path.insert(0, AliasFinder())


def __getattr__(name: str):
    # torch and transformers load only when a trainer module is asked for
    if name == "PPOTrainer":
        from reference_trainers.ppo import PPOTrainer

        return PPOTrainer
    if name in ALIASES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(name)
