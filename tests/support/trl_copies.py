"""A copy of an installed TRL trainer module in a package of its own, as a contributor patching it would have it:
what the `trl:MODULE` and `trl-grpo:MODULE` tests run the adapters on."""

from __future__ import annotations

import importlib.util
import re
import warnings
from pathlib import Path


def copy_installed_module(module: str, root: Path, package: str, search: Path | None = None) -> Path:
    """The installed `module`'s source as `package/<its file name>` under `root` (an empty `__init__.py` beside
    it), every relative import made absolute against `module`'s own package; returns `root`. `search`: a folder
    that holds the distribution (a `pip install --target` folder) to take the module from, without importing it,
    instead of the one this interpreter imports."""
    if search is not None:
        origin = search.joinpath(*module.split(".")).with_suffix(".py")
    else:
        with warnings.catch_warnings():  # importing trl.experimental warns that it is experimental
            warnings.simplefilter("ignore")
            origin = Path(importlib.util.find_spec(module).origin)
    source = origin.read_text()
    parts = module.split(".")[:-1]
    for dots in range(len(parts), 0, -1):  # the longest run of dots first: `...x` before `..x` before `.x`
        absolute = ".".join(parts[: len(parts) - dots + 1]) + "."
        source = re.sub(rf"^(\s*)from {re.escape('.' * dots)}(?=\w)", rf"\1from {absolute}", source, flags=re.M)
    assert not re.search(r"^\s*from \.", source, flags=re.M), "a relative import was left"
    folder = root / package
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / origin.name).write_text(source)
    return root


COPY = "patched_trl_grpo.grpo_trainer"
"""The module name of the copy `copy_trl_grpo_trainer` makes."""


def copy_trl_grpo_trainer(root: Path, search: Path | None = None) -> Path:
    """TRL's grpo_trainer.py as `patched_trl_grpo/grpo_trainer.py` under `root`, its relative imports made absolute
    (`search`: the folder of another TRL release to copy it from, as copy_installed_module)."""
    return copy_installed_module("trl.trainer.grpo_trainer", root, "patched_trl_grpo", search)
