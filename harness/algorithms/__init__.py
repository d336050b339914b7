"""The registry of algorithms: found by entry point, loaded when asked for, each declaring what the gate needs.

An algorithm is a package (`harness.algorithms.ppo`, `harness.algorithms.grpo`, or one of your
own) whose object satisfies `Algorithm`. It registers with one line in the entry-point group
`ppo_stats_harness.algorithms` of its distribution's metadata, as pytest and flake8 find plugins:

    [project.entry-points."ppo_stats_harness.algorithms"]
    rloo = "my_pkg.rloo.algorithm:RLOO"

An algorithm goes through three states, as a flake8 plugin does: found (a name and a
`module:attr`, from the installed distributions' entry points and, when the harness runs from
a source tree, from that tree's own pyproject.toml, so an edit there counts without
reinstalling), loaded (the object imported), and checked (it declares every member of
`Algorithm`, and its `mutation` every field of `Mutation`; a check id must match `CHECK_NAME`).
Nothing here names an algorithm's metric, and callers read what an algorithm declares instead
of probing it.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from harness.contract import Contract
from harness.errors import HarnessConfigError
from harness.scenario import Case, Scenario

if TYPE_CHECKING:
    from harness.instrument.observe import Instruments

ENTRY_POINT_GROUP = "ppo_stats_harness.algorithms"
DEFAULT_ALGORITHM = "ppo"
"""The algorithm listed first, and that of old reports (a factory always names its own; nothing is guessed)."""
CHECK_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
"""What a scenario's name (the part of a check id before `[`) must look like."""


@dataclass(frozen=True)
class Mutation:
    """What mutmut mutates for an algorithm, where its survivors and scores are kept (mutants/), and where its curated
    mutants are and how their ids begin (mutants/catalogue reads them)."""

    files: tuple[str, ...]
    """The mutated files, relative to the repository root, the trainer first."""
    triage_file: str
    """The file in mutants/ that triages its survivors."""
    baseline_section: str | None
    """Where its scores sit in mutants/baseline.json: None at the top level, else that key."""
    id_prefix: str
    """The lowercase letters its curated mutants' ids begin with (two digits of the bug class follow): its own,
    no other algorithm's."""
    catalogue: str
    """The folder of its curated mutants, relative to the repository root (or absolute): `classes.toml`, the bug
    classes, and `entries/`, one `<id>.toml` and `<id>.diff` a mutant. Algorithms may share one."""
    unit_tests: tuple[str, ...] = ()
    """Test modules (relative to the repository root) that mutmut runs beside the gate: the trainer's own tests
    of what no gate run reaches (a configuration's validation: the gate builds only valid ones). Each must import
    nothing but pytest and the trainer's package; the scratch copy holds them at the same paths."""
    rank_functions: tuple[str, ...] = ()
    """Functions of the mutated files whose code depends on the process group (`module:function` or
    `module:Class.method`, e.g. `reference_trainers.grpo:GRPOTrainer.window_step`): on one process their rank
    slices, world factors and `no_sync` contexts change nothing, so mutmut runs the gate across two processes
    (harness/ranks_suite/test_verify_dist.py, `python -m harness verify-dist` against the algorithm's target) beside the
    verify suite on their mutants. Its calls happen in the ranks, where mutmut's statistics cannot see them; the
    driver links it to these functions itself."""


@dataclass(frozen=True)
class Live:
    """An algorithm's live mode (docs/live.md): the gate's instruments on a user's own training run. Every path is
    `module:attr`, loaded only when asked for (by `harness.live`'s attributes or `python -m harness.live`)."""

    names: tuple[tuple[str, str], ...]
    """(public name, `module:attr`): what `harness.live` gives by that name, e.g. its adapters (`LiveCheck`) and
    its check of an interval (`check_interval`); the first algorithm in registry order that names it wins."""
    demo: str
    """`module:function`, the function taking the command's arguments (a list of str) and returning its exit
    status: what `python -m harness.live --target NAME` runs for a target of this algorithm."""

    def load(self, name: str) -> Any:
        """The object it gives as `name` (KeyError when it names none)."""
        module, _, attr = dict(self.names)[name].partition(":")
        return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class Bench:
    """What `python -m harness.bench` measures of an algorithm (docs/bench.md). Each is `module:attr` (or a module),
    loaded only when the bench asks for it; None: the algorithm declares none."""

    sizes: str | None = None
    """A mapping: size name -> `harness.bench.sizes.Size`, the gate's runs the bench times."""
    oracle: str | None = None
    """The gate's oracle on one run, in the pieces the bench times: `view(run, records) -> (view, mask problems)`,
    `expect(view, run, spec) -> expected metrics per update`, `compare(logs, expected, spec) -> verdicts`."""
    live_run: str | None = None
    """A module with `LiveBenchRun`, `pristine(run, device)` and `trainer(run, device, steps)`: the run that
    `--live` trains bare and under its live mode's `live_reference`."""

    def load(self, member: str) -> Any:
        """What `member` names, imported."""
        module, _, attr = getattr(self, member).partition(":")
        loaded = importlib.import_module(module)
        return getattr(loaded, attr) if attr else loaded


class Algorithm(Protocol):
    """What the gate needs of an algorithm; every member is declared, none is probed for."""

    name: str
    """The algorithm's name, as targets and reports name it."""
    default_target: str
    """The built-in target its gate runs when none is given (its reference trainer)."""
    targets: Mapping[str, str]
    """Built-in target name -> `module:factory`, followed, in entry-point syntax, by the package's install extras the
    target needs, if any (`module:factory [extra]`; harness.targets.extras)."""
    targets_with_argument: Mapping[str, str]
    """Names of `NAME:ARGUMENT` targets -> `module:function` (extras as in `targets`), the function taking ARGUMENT
    and returning a factory."""
    instruments: Instruments
    """What observe installs around its runs besides the gradient recorder, and how what they saw becomes its record
    of a run (`Ran.payload`; harness/instrument/observe.py `Instruments`). Its specs name the same (`instruments`)."""
    tolerances: Mapping[str, tuple[tuple[float, ...], ...]]
    """Its rows of the tolerance table: metric -> (abs, rel[, scale]) for float64, float32, bfloat16."""
    mutation: Mutation | None
    """What `python -m mutants mutmut --algorithm NAME` mutates and where its curated mutants are (None: mutmut does
    not run over it, and the catalogue holds no mutant of it)."""
    live: Live | None
    """Its live mode: what `harness.live` gives of it and what `python -m harness.live` runs for its targets (None:
    it has none)."""
    bench: Bench | None
    """What `python -m harness.bench` measures of it (None: nothing)."""
    contract: Contract
    """Its contract's version, the document that defines it, and what changed in it since version 1
    (harness/contract.py): `python -m harness --version` prints the version, a target may pin one."""

    @property
    def scenarios(self) -> Sequence[Scenario]:
        """Its scenarios, in report order."""
        ...

    def run_spec(self, seed: int, device: str, dtype: str, settings: dict | None = None) -> Any:
        """The run-wide settings every scenario spec of this algorithm takes."""
        ...

    def parse_settings(self, assignments: list[str]) -> dict:
        """`--set KEY=VALUE` assignments as typed settings (HarnessConfigError listing the keys)."""
        ...

    def impossible_spec(self, run_spec: Any) -> Any:
        """A spec whose sizes do not divide: building its run must raise HarnessConfigError ("not divisible")."""
        ...

    def rank_specs(self, seed: int) -> Mapping[str, Any]:
        """The runs each rank of `verify-dist` makes, by name."""
        ...

    def for_rank(self, spec: Any, rank: int, world_size: int) -> Any:
        """`spec` as rank `rank` of `world_size` runs it."""
        ...

    def rank_checks(self, runs: Mapping[str, Sequence[Any]], target: Any = None) -> list:
        """The checks of `verify-dist` on every rank's runs (`Ran`s by run name); `target`: the resolved target
        (harness/targets `Target`, None for none), whose declarations (optional and unlogged metrics, definitions)
        hold there as on one process."""
        ...


MEMBERS = (
    "name", "default_target", "targets", "targets_with_argument", "instruments", "tolerances", "mutation", "live",
    "bench", "contract", "scenarios", "run_spec", "parse_settings", "impossible_spec", "rank_specs", "for_rank",
    "rank_checks",
)  # fmt: skip
"""Every member of `Algorithm`, checked when an algorithm is loaded."""


MUTATION_ID_PREFIX = re.compile(r"^[a-z]+$")
"""What a `Mutation.id_prefix` must look like."""


def mutation_problems(mutation: Any) -> list[str]:
    """What is missing from an algorithm's `mutation` (None declares none): every field of `Mutation`, at least one
    mutated file, an id prefix of lowercase letters and a catalogue folder."""
    if mutation is None:
        return []
    lacking = [f.name for f in fields(Mutation) if not hasattr(mutation, f.name)]
    if lacking:
        return [f"does not declare {', '.join(lacking)}"]
    problems = []
    if not mutation.files or not all(isinstance(f, str) and f for f in mutation.files):
        problems.append("names no mutated file")
    if not isinstance(mutation.id_prefix, str) or not MUTATION_ID_PREFIX.match(mutation.id_prefix):
        problems.append(f"id_prefix must be lowercase letters, not {mutation.id_prefix!r}")
    if not isinstance(mutation.catalogue, str) or not mutation.catalogue:
        problems.append("names no catalogue folder")
    return problems


def _source_tree_entries() -> dict[str, str]:
    """The entry points of this group in the pyproject.toml of the source tree the harness runs from, if any."""
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    if not pyproject.is_file():
        return {}
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            return {}
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    if data.get("project", {}).get("name") != "ppo-stats-harness":
        return {}
    return dict(data["project"].get("entry-points", {}).get(ENTRY_POINT_GROUP, {}))


@functools.lru_cache(maxsize=1)
def found() -> dict[str, str]:
    """Every registered algorithm: name -> `module:attr` (the source tree's own entries win over stale metadata)."""
    every = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
    every.update(_source_tree_entries())
    return every


def known_algorithms() -> list[str]:
    """The registered algorithm names, the default first."""
    names = sorted(found())
    return sorted(names, key=lambda n: n != DEFAULT_ALGORITHM)


@functools.cache
def get(name: str) -> Algorithm:
    """The registered algorithm `name`, loaded and checked (HarnessConfigError for an unknown or incomplete one)."""
    every = found()
    if name not in every:
        known = ", ".join(known_algorithms()) or "none (is the package installed?)"
        raise HarnessConfigError(f"unknown algorithm {name!r}; known: {known}")
    module, _, attr = every[name].partition(":")
    try:
        algorithm = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise HarnessConfigError(f"algorithm {name!r}: cannot load {every[name]!r} ({exc})") from None
    lacking = [member for member in MEMBERS if member not in dir(algorithm)]
    if lacking:
        raise HarnessConfigError(f"algorithm {name!r} ({every[name]}) does not declare {', '.join(lacking)}")
    wrong = mutation_problems(algorithm.mutation)
    if wrong:
        raise HarnessConfigError(f"algorithm {name!r} ({every[name]}): its mutation {'; '.join(wrong)}")
    if algorithm.name != name:
        raise HarnessConfigError(f"algorithm registered as {name!r} calls itself {algorithm.name!r}")
    return algorithm


def builtin_targets() -> Mapping[str, tuple[str, str]]:
    """Every built-in target name -> (algorithm, `module:factory`, with the extras it needs as declared)."""
    out: dict[str, tuple[str, str]] = {}
    for name in known_algorithms():
        for target, path in get(name).targets.items():
            out[target] = (name, path)
    return out


def builtin_targets_with_argument() -> Mapping[str, tuple[str, str]]:
    """Every built-in `NAME:ARGUMENT` target name -> (algorithm, `module:function` with its extras), the function
    taking ARGUMENT."""
    out: dict[str, tuple[str, str]] = {}
    for name in known_algorithms():
        for target, path in get(name).targets_with_argument.items():
            out[target] = (name, path)
    return out


def with_live() -> list[str]:
    """The registered algorithms that declare a live mode, in registry order."""
    return [name for name in known_algorithms() if get(name).live is not None]


@functools.cache
def _cases(name: str) -> tuple[Case, ...]:
    every = tuple(case for scenario in get(name).scenarios for case in scenario.cases())
    bad = sorted({c.scenario.name for c in every if not CHECK_NAME.match(c.scenario.name)})
    if bad:
        raise HarnessConfigError(f"algorithm {name!r}: scenario names must match {CHECK_NAME.pattern}: {bad}")
    return every


def cases(name: str) -> list[Case]:
    """Every check of algorithm `name`, one case per point of each scenario's sweep."""
    return list(_cases(name))


def check_ids(name: str = DEFAULT_ALGORITHM) -> dict[str, str]:
    """Check id -> scenario name, for every check of algorithm `name` (the mutant catalogue names these)."""
    return {str(case.id): case.scenario.name for case in cases(name)}


SESSION_ALGORITHMS: list = []
"""The algorithm of each running gate session's target, innermost last: callables, pushed and popped by the
pytest plugin (harness/plugin.py), each returning its session's `--ppo-target`'s algorithm when first asked."""


def case(check_id: str, name: str | None = None) -> Case:
    """The case whose check id is `check_id`, of algorithm `name`.

    Without `name`, the algorithm is found from the id: the one registered algorithm that has it. An id
    several algorithms have (such as `freshness`) is the target's algorithm's inside a gate's pytest session
    (`--ppo-target`), and a KeyError asking for `name` outside one. A KeyError names the known ids of an id
    no algorithm (or not `name`) has.
    """
    if name is not None:
        found_case = next((c for c in cases(name) if str(c.id) == check_id), None)
        if found_case is not None:
            return found_case
        raise KeyError(f"no check {check_id!r} in {name}; known: {', '.join(str(c.id) for c in cases(name))}")
    having = {n: c for n in known_algorithms() for c in cases(n) if str(c.id) == check_id}
    if len(having) == 1:
        return next(iter(having.values()))
    if len(having) > 1:
        session = SESSION_ALGORITHMS[-1]() if SESSION_ALGORITHMS else None
        if session in having:
            return having[session]
        raise KeyError(
            f"check {check_id!r} is a check of {' and '.join(having)}: name the algorithm, "
            f"e.g. case({check_id!r}, {next(iter(having))!r})"
        )
    names = known_algorithms()
    known = ", ".join(str(c.id) for n in names for c in cases(n))
    raise KeyError(f"no check {check_id!r} in {' or '.join(names)}; known: {known}")
