"""Targets: which trainer the gate runs, and for which algorithm.

`resolve("reference")`, `resolve("trl")` (the built-in targets of the registered
algorithms), `resolve("trl:my_pkg.ppo_trainer")` (a built-in target given an argument:
TRL's adapter on another module) or `resolve("package.module:factory")` returns a
`Target`: the factory `factory(spec) -> TargetRun` (see
`harness.instrument.observe.TargetRun`), the algorithm whose scenarios it runs, and what the
target declares, read once here so that nothing later reads the factory's attributes. A name
before the colon that is a built-in target taking an argument wins over a module of
that name. A factory of your own names its algorithm with an `algorithm` attribute
(`factory.algorithm = "ppo"`, or "grpo"): the algorithm is never guessed, and a factory that
names none is a HarnessConfigError. A factory may also declare, with an `optional_metrics` attribute
(`factory.optional_metrics = ("policy_loss",)`), the metrics its trainer logs that the algorithm's contract
makes optional: the gate then holds it to logging them (`declared_metrics`); and, with `unlogged_metrics`
(`factory.unlogged_metrics = ("<metric name>",)`), the contract's metrics its trainer does not log, each a name
of its algorithm's contract or a name one of the contract's patterns stands for (`rewards/*/mean`): every check
leaves them out of its comparison, with a note, and fails naming one the trainer logs anyway (harness/unlogged.py);
and, with `contract_version`
(`factory.contract_version = 2`), the version of its algorithm's contract it was written for: a failing check
that a later change touches then names that change (harness/contract.py); and, with `not_applicable`
(`factory.not_applicable = {"loss_type=vespo": "our trainer has no vespo"}`), the checks it cannot run, each with
its reason: a key `KEY=VALUE` names every check swept with that parameter (`uneven_lengths[loss_type=vespo]`), any
other key is a check id or a pattern of them (`reward_stats*`, fnmatch's); such a check is not run and is reported
not applicable with the reason (`Target.not_applicable_reason`); and, with `definitions` (`factory.definitions =
"verl"`, or a dict), which of its algorithm's published definitions its trainer implements (harness/definitions.py,
`Target.definition`). A built-in target declares the
package's install extras it needs where its algorithm names it, after its `module:factory` in entry-point syntax
(`"harness.algorithms.ppo.targets.trl:factory [trl-ppo]"`; `extras(name)` reads them without loading it).
A `not_applicable` key that names no check of the algorithm's gate, and anything that cannot be resolved, is a
HarnessConfigError (exit 2); whether the run it builds fits that algorithm is checked by `harness.preflight`.
"""

from __future__ import annotations

import fnmatch
import importlib
import inspect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from harness.algorithms import builtin_targets, builtin_targets_with_argument, known_algorithms
from harness.errors import HarnessConfigError
from harness.unlogged import UNLOGGED_METRICS
from harness.verdict import CheckId


@dataclass(frozen=True)
class Target:
    """A resolved target and what it declares, read once (`resolve`)."""

    name: str
    """Its name as given (`--target`)."""
    algorithm: str
    """The registered algorithm whose scenarios it runs."""
    factory: Callable
    """`factory(spec) -> TargetRun`."""
    optional_metrics: tuple[str, ...] = ()
    """The contract's optional metrics its trainer declares it logs (`factory.optional_metrics`)."""
    unlogged_metrics: tuple[str, ...] = ()
    """The contract's metrics its trainer declares it does not log (`factory.unlogged_metrics`), names or the
    contract's patterns (harness/unlogged.py)."""
    contract_version: int | None = None
    """The version of its algorithm's contract it was written for (None: it pins none)."""
    extras: tuple[str, ...] = ()
    """The package's install extras it needs (a built-in target's, as its algorithm declares them)."""
    not_applicable: tuple[tuple[str, str], ...] = ()
    """(key, reason) of each check it declares it cannot run (`factory.not_applicable`), in its order."""
    definitions: tuple[tuple[str, object], ...] = ()
    """(name, value) of every definition of its algorithm's vocabulary, as it declares them (`factory.definitions`)
    or the default profile fixes them (harness/definitions.py)."""

    def definition(self, name: str, default: object = None) -> object:
        """The value of definition `name` its trainer implements (`default` when the algorithm publishes none)."""
        return next((value for key, value in self.definitions if key == name), default)

    def not_applicable_reason(self, check_id: CheckId) -> str | None:
        """The declared reason of the first declaration that matches `check_id`, None when none does."""
        return next((reason for key, reason in self.not_applicable if matches(key, check_id)), None)

    def unmatched(self, check_ids: Iterable[CheckId]) -> list[str]:
        """The keys of `not_applicable` that match none of `check_ids` (a typo, or a check the gate does not have)."""
        ids = list(check_ids)
        return [key for key, _ in self.not_applicable if not any(matches(key, i) for i in ids)]


def matches(key: str, check_id: CheckId) -> bool:
    """True when the declaration `key` names `check_id`: `KEY=VALUE` one of its parameters, else its id, or an fnmatch
    pattern of ids (where `[` opens a set of characters)."""
    name, equals, value = key.partition("=")
    if equals and "[" not in key:
        return any(k == name.strip() and str(v) == value.strip() for k, v in check_id.params)
    return key == str(check_id) or fnmatch.fnmatchcase(str(check_id), key)


_WITH_EXTRAS = re.compile(r"^(?P<path>[^\[]*?)\s*(?:\[(?P<extras>[^\]]*)\])?\s*$")
"""`module:attr`, then optionally `[extra, ...]`, as in pyproject.toml's entry points."""


def _split(path: str) -> tuple[str, tuple[str, ...]]:
    """(`module:attr`, its extras) of `module:attr [extra, ...]`."""
    found = _WITH_EXTRAS.match(path)
    if found is None:
        return path, ()
    listed = found.group("extras") or ""
    return found.group("path"), tuple(e.strip() for e in listed.split(",") if e.strip())


def _load(name: str, path: str) -> Callable:
    """The callable at `module:attr` (any extras after it aside), or a HarnessConfigError saying why not."""
    module_name, _, attr = _split(path)[0].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise HarnessConfigError(f"target {name!r}: cannot import {module_name!r} ({exc})") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise HarnessConfigError(f"target {name!r}: {module_name!r} has no callable {attr!r}")
    return factory


def _takes_one_spec(factory: Callable) -> bool:
    """True when `factory` can be called with one positional argument (the spec)."""
    try:
        inspect.signature(factory).bind(object())
    except TypeError:
        return False
    except ValueError:  # no signature to read (a builtin): let the call decide
        return True
    return True


OPTIONAL_METRICS = "optional_metrics"
"""The factory attribute naming the contract's optional metrics its trainer logs (a tuple of names)."""


def declared_metrics(factory: Callable) -> tuple[str, ...]:
    """The optional metrics `factory` declares its trainer logs (`factory.optional_metrics`), () when it declares
    none; HarnessConfigError when the attribute is not a list or tuple of names."""
    declared = getattr(factory, OPTIONAL_METRICS, ())
    if not isinstance(declared, (list, tuple)) or not all(isinstance(n, str) for n in declared):
        raise HarnessConfigError(f"`{OPTIONAL_METRICS}` of the factory must be a tuple of metric names, "
                                 f"got {declared!r}")  # fmt: skip
    return tuple(declared)


def declared_unlogged_metrics(factory: Callable, algorithm: str, optional: Iterable[str] = ()) -> tuple[str, ...]:
    """The contract's metrics `factory` declares its trainer does not log (`factory.unlogged_metrics`), () when it
    declares none; HarnessConfigError when the attribute is not a list or tuple of names, a name is none of
    `algorithm`'s contract (nor one its patterns stand for), or one is also among its `optional` metrics."""
    from harness.algorithms import get

    declared = getattr(factory, UNLOGGED_METRICS, ())
    if not isinstance(declared, (list, tuple)) or not all(isinstance(n, str) for n in declared):
        raise HarnessConfigError(f"`{UNLOGGED_METRICS}` of the factory must be a tuple of metric names, "
                                 f"got {declared!r}")  # fmt: skip
    contract = get(algorithm).contract
    unknown = [n for n in declared if not contract.knows(n)]
    if unknown:
        known = ", ".join(contract.metrics)
        raise HarnessConfigError(f"`{UNLOGGED_METRICS}` names {', '.join(map(repr, unknown))}, no metric of the "
                                 f"{algorithm} contract ({contract.document}): {known}")  # fmt: skip
    both = [n for n in declared if n in optional]
    if both:
        raise HarnessConfigError(f"{', '.join(map(repr, both))} declared both logged (`{OPTIONAL_METRICS}`) and not "
                                 f"logged (`{UNLOGGED_METRICS}`)")  # fmt: skip
    return tuple(declared)


NOT_APPLICABLE = "not_applicable"
"""The factory attribute naming the checks its trainer cannot run (a dict of key to reason)."""


def declared_not_applicable(factory: Callable) -> tuple[tuple[str, str], ...]:
    """(key, reason) of each check `factory` declares it cannot run (`factory.not_applicable`), () when it declares
    none; HarnessConfigError when the attribute is not a dict of non-empty strings."""
    declared = getattr(factory, NOT_APPLICABLE, {})
    if not isinstance(declared, dict) or not all(
        isinstance(v, str) and v.strip() for pair in declared.items() for v in pair
    ):
        raise HarnessConfigError(f"`{NOT_APPLICABLE}` of the factory must be a dict of a check (id, pattern or "
                                 f"KEY=VALUE) to the reason it cannot run it, got {declared!r}")  # fmt: skip
    return tuple(declared.items())


DEFINITIONS = "definitions"
"""The factory attribute naming the definitions its trainer implements (a profile's name, or a dict)."""


def declared_definitions(factory: Callable, algorithm: str) -> tuple[tuple[str, object], ...]:
    """(name, value) of every definition of `algorithm`'s vocabulary as `factory.definitions` declares them (the
    default profile where it declares none); HarnessConfigError for an unknown name, profile or value."""
    from harness.algorithms import get
    from harness.definitions import Vocabulary

    vocabulary = getattr(get(algorithm), DEFINITIONS, None) or Vocabulary()
    return vocabulary.resolve(getattr(factory, DEFINITIONS, None))


def declare_hint(name: str, *algorithms: str) -> str:
    """How a factory names its algorithm: one of `algorithms` (none given: every registered one, the default first)."""
    names = list(algorithms) or known_algorithms()
    attr = name.partition(":")[2] or "factory"
    others = " or ".join(f'"{n}"' for n in names[1:])
    return f'set `{attr}.algorithm = "{names[0]}"` on the factory' + (f" (or {others})" if others else "")


def _declared_path(name: str) -> tuple[str, str] | None:
    """(algorithm, `module:attr [extras]`) of the built-in target `name` or `NAME:ARGUMENT`; None for a module's."""
    builtin = builtin_targets()
    prefix, colon, _ = name.partition(":")
    if name in builtin:
        return builtin[name]
    with_argument = builtin_targets_with_argument()
    if colon and prefix in with_argument:
        return with_argument[prefix]
    return None


def extras(name: str) -> tuple[str, ...]:
    """The package's install extras target `name` needs, as its algorithm declares them, without loading it (() for a
    module's own factory, or a target that needs none)."""
    declared = _declared_path(name)
    return _split(declared[1])[1] if declared is not None else ()


def resolve(name: str) -> Target:
    """The target named `name`, with what it declares; HarnessConfigError (exit 2) when it cannot be found or is not
    a factory, or a declaration is malformed."""
    prefix, colon, argument = name.partition(":")
    declared = _declared_path(name)
    if declared is not None and name in builtin_targets():
        algorithm, path = declared
        factory = _load(name, path)
    elif declared is not None:
        algorithm, path = declared
        if not argument.strip():
            raise HarnessConfigError(f"target {name!r}: name a module after {prefix + ':'!r}, e.g. {prefix}:my_pkg.mod")
        factory = _load(name, path)(argument.strip())
    elif colon:
        algorithm, factory = None, _load(name, name)
    else:
        builtin, with_argument = builtin_targets(), builtin_targets_with_argument()
        known = ", ".join([*sorted(builtin), *(f"{n}:MODULE" for n in sorted(with_argument))])
        raise HarnessConfigError(f"unknown target {name!r}: use one of {known} or 'package.module:factory'")
    if not _takes_one_spec(factory):
        raise HarnessConfigError(f"target {name!r}: the factory must take one argument, the scenario spec")
    if algorithm is None:
        algorithm = getattr(factory, "algorithm", None)
        if algorithm is None:
            raise HarnessConfigError(f"target {name!r} names no algorithm: {declare_hint(name)}")
    if algorithm not in known_algorithms():
        raise HarnessConfigError(
            f"target {name!r} names algorithm {algorithm!r}; known: {', '.join(sorted(known_algorithms()))}"
        )
    try:
        optional, cannot = declared_metrics(factory), declared_not_applicable(factory)
        unlogged = declared_unlogged_metrics(factory, algorithm, optional)
        definitions = declared_definitions(factory, algorithm)
    except HarnessConfigError as exc:
        raise HarnessConfigError(f"target {name!r}: {exc}") from None
    pinned = pinned_contract(factory, algorithm, name)
    if pinned is None and declared is not None:
        from harness.algorithms import get

        pinned = get(algorithm).contract.version  # a built-in target ships with the gate: written for its contract
    needs = _split(declared[1])[1] if declared is not None else ()
    target = Target(name, algorithm, factory, optional_metrics=optional, contract_version=pinned, extras=needs,
                    not_applicable=cannot, definitions=definitions, unlogged_metrics=unlogged)  # fmt: skip
    if cannot:
        from harness.algorithms import cases

        unmatched = target.unmatched(c.id for c in cases(algorithm))
        if unmatched:
            raise HarnessConfigError(
                f"target {name!r} declares not applicable {', '.join(map(repr, unmatched))}, which names no check of "
                f"the {algorithm} gate (a check id, a pattern of them, or a KEY=VALUE parameter of one)"
            )
    return target


def pinned_contract(factory: Callable, algorithm: str, name: str = "factory") -> int | None:
    """The contract version `factory` says it was written for (`factory.contract_version`), None when it says none;
    HarnessConfigError when it is not a version of `algorithm`'s contract (harness/contract.py)."""
    from harness.algorithms import get
    from harness.contract import CONTRACT_VERSION

    try:
        return get(algorithm).contract.check_pin(getattr(factory, CONTRACT_VERSION, None), name)
    except ValueError as exc:
        raise HarnessConfigError(str(exc)) from None
