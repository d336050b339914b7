"""Systems knobs never change a statistic: which knob a failing invariance comparison implicates, said as a finding.

An invariance check runs one workload several ways that differ only in how it is cut (the micro-batch size, the
accumulation, the passes...; at learning rate 0, so that nothing the cut changes can move the weights) and compares
each run's logged statistics with a reference run's. Whatever definition a trainer declares for a statistic, the
cut must not change it. When it does, the metric's verdicts fail as for any comparison, and `knob_findings` says
which knob it depends on, as a diagnosis of the check (`Check.diagnose`) of its own: `entropy depends on the
micro-batch size (4 -> 2)`, its value the metric at the first run that moved it, its gap the move, its source the
value at the reference cut. The words hold no number of the run, so that a baseline can pin them.

A knob is implicated for a metric when every run in which the metric changed changed that knob, and no run that
changed that knob alone left the metric unchanged. Knobs the algorithm declares (`Knob`: the setting's key and its
words); a setting that follows from the others (at a fixed batch, the micro-batches per generation follow from the
micro-batch size) is simply not declared. When no knob is implicated the finding says the metric depends on how the
batch is cut, naming the first run that changed it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .verdict import Diagnosis


@dataclass(frozen=True)
class Knob:
    """A systems setting that must not change a statistic: its key in a run's settings, and its words."""

    key: str
    words: str


@dataclass(frozen=True)
class CutRun:
    """One run of an invariance comparison: its knob settings, its label, and the metrics that changed in it against
    the reference run, each with its (reference, this run's) values."""

    settings: Mapping[str, Any]
    label: str
    changed: Mapping[str, tuple[float, float]]


def knob_findings(reference: Mapping[str, Any], runs: Sequence[CutRun], knobs: Sequence[Knob]) -> list[Diagnosis]:
    """One finding per metric that changed in some run, in the order the runs first show them."""
    order = list(dict.fromkeys(name for run in runs for name in run.changed))
    findings = []
    for name in order:
        moved = [run for run in runs if name in run.changed]
        kept = [run for run in runs if name not in run.changed]
        differs = [{k.key for k in knobs if run.settings.get(k.key) != reference.get(k.key)} for run in moved]
        implicated = set.intersection(*differs) if differs else set()
        implicated -= {key for run in kept for key in _changed_alone(run, reference, knobs)}
        first = moved[0]
        before, after = first.changed[name]
        words = [k for k in knobs if k.key in implicated]
        if words:
            how = " and ".join(f"{k.words} ({reference.get(k.key)} -> {first.settings.get(k.key)})" for k in words)
            said = f"{name} depends on {how}"
        else:
            said = f"{name} depends on how the batch is cut (at {first.label})"
        findings.append(Diagnosis((), said, after, after - before, source=f"{fmt(before)} at the reference cut"))
    return findings


def _changed_alone(run: CutRun, reference: Mapping[str, Any], knobs: Sequence[Knob]) -> set[str]:
    """The one knob `run` changes, when it changes exactly one; else none."""
    changed = {k.key for k in knobs if run.settings.get(k.key) != reference.get(k.key)}
    return changed if len(changed) == 1 else set()


def fmt(value: float) -> str:
    """A value as the failure lines print one (6 significant digits)."""
    return f"{value:.6g}"
