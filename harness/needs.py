"""What the commands need installed, and the one line a command prints when it cannot import it.

The package's own dependencies (torch, transformers, accelerate, ...) come with it; what the gate's engine needs
beside them (Hypothesis, for the PPO gate) is the `gate` extra, since live mode runs in a user's training environment
without it; pytest is needed only by the pytest plugin and mutmut's runs;
TRL is the `trl` extra (today's release) or `trl-ppo` (1.12.0, for the PPO adapter). A command run without one of
them stops with one line on stderr naming what to install, and exit 2 (a usage error), never a traceback:
`guarded` wraps each command's main, `require` checks ahead of a long run what it will import later.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator

GATE = "pip install 'ppo-stats-harness[gate]'"
TRL = "pip install 'ppo-stats-harness[trl]'"
TORCH = "pip install torch (the build for your machine: https://pytorch.org/get-started/locally/)"
PACKAGE = "pip install ppo-stats-harness (it depends on it)"

INSTALL = {
    "pytest": GATE,
    "_pytest": GATE,
    "pluggy": GATE,
    "hypothesis": GATE,
    "torch": TORCH,
    **dict.fromkeys(("transformers", "accelerate", "tokenizers", "numpy", "psutil", "tqdm"), PACKAGE),
    # TRL, and what its GRPO trainer imports: datasets (a dependency of TRL), requests (undeclared by TRL)
    **dict.fromkeys(("trl", "datasets", "requests"), TRL),
    "xdist": "pip install 'ppo-stats-harness[test]'",
    "tensorboard": "pip install tensorboard (report_to=['tensorboard'] needs it)",
    "mutmut": "pip install -e '.[mutation]' (from a clone)",
}
"""A module's top-level name -> how to install it."""

OWN = ("harness", "reference_trainers", "reference_ppo", "mutants")
"""This project's packages: failing to import one of them is a defect, shown with its traceback."""


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, then what caused it (`raise ... from`, or the exception being handled), in turn."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def missing(exc: BaseException) -> str | None:
    """The top-level name of the third-party module whose import `exc` (an ImportError, or what it was raised
    from) failed on; None when there is none, or it is one of this project's own packages."""
    for cause in _causes(exc):
        name = getattr(cause, "name", None) if isinstance(cause, ImportError) else None
        if name:
            top = name.split(".")[0]
            return None if top in OWN else top
    return None


def install_hint(module: str, install: dict[str, str] | None = None) -> str:
    """How to install the top-level module `module` (`install` first, then INSTALL; else `pip install NAME`)."""
    return {**INSTALL, **(install or {})}.get(module, f"pip install {module}")


def line(command: str, exc: BaseException, install: dict[str, str] | None = None) -> str | None:
    """The one line `command` prints when it could not import what `exc` names; None when `exc` is not such a
    failure (a defect of this project, or an ImportError that names no module)."""
    module = missing(exc)
    if module is None:
        return None
    first = str(exc).strip().splitlines()
    why = first[0] if first else f"No module named {module!r}"
    return f"error: {command} needs {module}, which cannot be imported ({why}): {install_hint(module, install)}"


def guarded(command: str, main: Callable[[], int], install: dict[str, str] | None = None) -> int:
    """`main()`, or exit code 2 with one line on stderr when it could not import a module it needs (`line`).

    `install`: how this command installs a module, where it differs from INSTALL (live mode's TRL)."""
    try:
        return main()
    except ImportError as exc:
        said = line(command, exc, install)
        if said is None:
            raise
        print(said, file=sys.stderr, flush=True)
        return 2


def require(*modules: str) -> None:
    """Raise ModuleNotFoundError for the first of `modules` (top-level names) that is not installed, without
    importing any: what a command checks before a run that would import them only later."""
    for module in modules:
        if importlib.util.find_spec(module) is None:
            raise ModuleNotFoundError(f"No module named {module!r}", name=module)
