"""Which trainer mutmut mutates, and the scratch `[tool.mutmut]` that says so: one entry per algorithm.

`python -m mutants mutmut --algorithm NAME` (the default algorithm, PPO, when none is named). Each
registered algorithm that declares a `mutation` (harness/algorithms) names, once, the files mutmut
mutates (PPO and GRPO: their trainer first, then its configuration, then common.py, which both
trainers use, so that its mutants run against both gates), the file its survivors are triaged
in, and where its baseline scores sit in mutants/baseline.json; its tests run against its default
target (`--ppo-target`). A mutant of common.py has one name in both runs, triaged in each
algorithm's file for that algorithm's gate.

The project's own `[tool.mutmut]` (pyproject.toml) is the default algorithm's: it must mutate
exactly its files and name no target (the verify suite's default is that algorithm's target). The driver writes
each run's scratch copy of it with the algorithm's files as `only_mutate` and
`--ppo-target <target>` added to `pytest_add_cli_args`, then reads it back and checks it
(`config_problems`), so the files and the target have a single source: ALGORITHMS.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

HOOKS_MODULE = "ppo_mutmut_hooks"
TARGET_OPTION = "--ppo-target"
RANK_TESTS = "harness/ranks_suite/test_verify_dist.py"
"""The two-process gate as a test: selected beside the verify suite for an algorithm with `rank_functions`."""


@dataclass(frozen=True)
class MutmutAlgorithm:
    """What mutmut runs over for one algorithm, and against which target of the gate."""

    name: str
    files: tuple[str, ...]
    """The mutated files, the trainer first (the report's `file`)."""
    target: str
    """The `--ppo-target` the verify suite runs against (the unmutated trainer's target)."""
    triage_file: str
    """The file (in mutants/) that triages this algorithm's survivors."""
    baseline_section: str | None
    """Where its scores sit in baseline.json: None at the top level (PPO's, recorded first), else that key."""
    unit_tests: tuple[str, ...] = ()
    """The trainer's own test modules mutmut runs beside the verify suite (copied into the scratch project)."""
    rank_functions: tuple[str, ...] = ()
    """`module:function` or `module:Class.method` of the functions whose mutants also run RANK_TESTS."""

    @property
    def selection_extras(self) -> tuple[str, ...]:
        """What the scratch `[tool.mutmut]` selects beside the verify suite: the unit tests, then RANK_TESTS."""
        return (*self.unit_tests, *((RANK_TESTS,) if self.rank_functions else ()))

    @property
    def rank_links(self) -> tuple[str, ...]:
        """mutmut's names of `rank_functions` (`module.x_function`, `module.xǁClassǁmethod`), as its statistics
        link functions to tests."""
        out = []
        for entry in self.rank_functions:
            module, _, function = entry.partition(":")
            owner, _, method = function.rpartition(".")
            out.append(f"{module}.x\u01c1{owner}\u01c1{method}" if owner else f"{module}.x_{function}")
        return tuple(out)

    @property
    def trainer(self) -> str:
        """The trainer file, the first of `files`."""
        return self.files[0]

    @property
    def label(self) -> str:
        """The algorithm's name as the report writes it."""
        return self.name.upper()


def _algorithms() -> dict[str, MutmutAlgorithm]:
    """One entry per registered algorithm that declares a `mutation` (harness.algorithms), never typed here."""
    from harness.algorithms import get, known_algorithms

    out = {}
    for name in known_algorithms():
        algorithm = get(name)
        if algorithm.mutation is not None:
            m = algorithm.mutation
            out[name] = MutmutAlgorithm(
                name, m.files, algorithm.default_target, m.triage_file, m.baseline_section, m.unit_tests,
                m.rank_functions,
            )
    return out


def _default() -> str:
    """The registry's default algorithm (harness.algorithms.DEFAULT_ALGORITHM)."""
    from harness.algorithms import DEFAULT_ALGORITHM

    return DEFAULT_ALGORITHM


ALGORITHMS = _algorithms()
DEFAULT = _default()
"""The algorithm of the project's own `[tool.mutmut]`, and of results that name none."""


def algorithm(name: str | None) -> MutmutAlgorithm:
    """The algorithm called `name` (the default where None: results written before GRPO runs existed are PPO's)."""
    try:
        return ALGORITHMS[name or DEFAULT]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}: one of {', '.join(ALGORITHMS)}") from None


def module_names() -> tuple[str, ...]:
    """The dotted modules of every algorithm's mutated files (the hooks plugin restores their code names)."""
    return tuple(path.removesuffix(".py").replace("/", ".") for a in ALGORITHMS.values() for path in a.files)


def mutmut_config(pyproject) -> dict:
    """The `[tool.mutmut]` section of `pyproject`, which must exist: it is mutmut's whole configuration."""
    data = tomllib.loads(Path(pyproject).read_text(encoding="utf-8"))
    config = data.get("tool", {}).get("mutmut")
    if not config:
        raise RuntimeError(f"{pyproject} has no [tool.mutmut] section")
    return config


def named_target(args: list[str]) -> str | None:
    """The value of `--ppo-target` in pytest arguments (`--ppo-target X` or `--ppo-target=X`); None where absent."""
    for i, arg in enumerate(args):
        if arg == TARGET_OPTION:
            return args[i + 1] if i + 1 < len(args) else ""
        if arg.startswith(TARGET_OPTION + "="):
            return arg.partition("=")[2]
    return None


def config_problems(config: dict, algo: MutmutAlgorithm, target: str | None) -> list[str]:
    """What is wrong with a `[tool.mutmut]` for `algo`, whose pytest arguments must name `target` (None: none)."""
    problems = []
    if sorted(config.get("only_mutate", [])) != sorted(algo.files):
        problems.append(f"[tool.mutmut] only_mutate must list exactly {', '.join(algo.files)}")
    if f"{HOOKS_MODULE}.py" not in config.get("also_copy", []):
        problems.append(f"[tool.mutmut] also_copy must list {HOOKS_MODULE}.py")
    args = config.get("pytest_add_cli_args", [])
    if HOOKS_MODULE not in args:
        problems.append(f"[tool.mutmut] pytest_add_cli_args must load -p {HOOKS_MODULE}")
    selection = config.get("pytest_add_cli_args_test_selection", [])
    missing = [path for path in algo.selection_extras if path not in selection]
    if missing:
        problems.append(f"[tool.mutmut] pytest_add_cli_args_test_selection must list {', '.join(missing)}")
    if named_target(args) != target:
        wanted = f"pass {TARGET_OPTION} {target}" if target else f"name no {TARGET_OPTION} (the driver adds it)"
        problems.append(f"[tool.mutmut] pytest_add_cli_args must {wanted}")
    return problems


SECTION = re.compile(r"^\[(?P<name>[^\]]+)\]\s*$")


def _set_line(lines: list[str], start: int, end: int, key: str, value: list[str]) -> None:
    """Replace the one-line `key = [...]` of lines[start:end] by `value`; refuse any other shape."""
    pattern = re.compile(rf"^{re.escape(key)}\s*=")
    found = [i for i in range(start, end) if pattern.match(lines[i])]
    if len(found) != 1 or not lines[found[0]].rstrip().endswith("]"):
        raise RuntimeError(f"[tool.mutmut] must set {key} once, on one line")
    lines[found[0]] = f"{key} = {json.dumps(value)}\n"


def scratch_config(text: str, algo: MutmutAlgorithm) -> str:
    """`text` (a pyproject.toml) with its `[tool.mutmut]` mutating `algo`'s files and testing `algo`'s target."""
    lines = text.splitlines(keepends=True)
    headers = [(i, m.group("name")) for i, line in enumerate(lines) if (m := SECTION.match(line))]
    starts = [i for i, name in headers if name.strip() == "tool.mutmut"]
    if len(starts) != 1:
        raise RuntimeError("pyproject.toml must have one [tool.mutmut] section")
    start = starts[0] + 1
    end = next((i for i, _ in headers if i > starts[0]), len(lines))
    config = tomllib.loads(text)["tool"]["mutmut"]
    _set_line(lines, start, end, "only_mutate", list(algo.files))
    args = list(config.get("pytest_add_cli_args", []))
    _set_line(lines, start, end, "pytest_add_cli_args", [*args, TARGET_OPTION, algo.target])
    if algo.selection_extras:
        selection = list(config.get("pytest_add_cli_args_test_selection", []))
        _set_line(lines, start, end, "pytest_add_cli_args_test_selection", [*selection, *algo.selection_extras])
    return "".join(lines)


def write_scratch_config(scratch: Path, algo: MutmutAlgorithm) -> list[str]:
    """Check the project's `[tool.mutmut]` (copied to `scratch`), rewrite it for `algo`, check that; the problems."""
    pyproject = scratch / "pyproject.toml"
    problems = config_problems(mutmut_config(pyproject), ALGORITHMS[DEFAULT], None)
    if problems:
        return [f"pyproject.toml: {p}" for p in problems]
    pyproject.write_text(scratch_config(pyproject.read_text(encoding="utf-8"), algo), encoding="utf-8")
    return [f"scratch pyproject.toml: {p}" for p in config_problems(mutmut_config(pyproject), algo, algo.target)]
