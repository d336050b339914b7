"""Every count that README.md and docs/*.md state and that has a source of truth is read from that source: the check
registries, the pinned TRL verdicts, the committed baselines, the loss types. A check added, a verdict or a baseline
changed fails here until the docs say the new number.

Counts that are measurements (a timing, a mutation run's score or its mutant counts, a suite's "N passed" on a
date, the checks a gate had when a change was measured) are history, not counts with a source: they are left as
they were measured (docs/development.md, docs/bench.md, docs/gate.md's seed table, "403 metrics over the 54 checks"
in docs/trl-grpo.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.algorithms import cases
from harness.algorithms.grpo.spec import LOSS_TYPES
from harness.baseline import load
from tests.harness.algorithms.grpo.targets.test_trl_grpo_verdict import HALF_PRECISION_NOT_APPLICABLE, TRL_GRPO_FAILS
from tests.harness.algorithms.grpo.targets.test_trl_newest import TRL_NEWEST_FAILS
from tests.harness.algorithms.ppo.targets.test_trl_verdict import TRL_FAILS

ROOT = Path(__file__).resolve().parents[2]
WORDS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}


def baseline(name: str, algorithm: str) -> set[str]:
    return {entry.check for entry in load(ROOT / "baselines" / name, algorithm).entries}


def ppo_checks() -> int:
    return len(cases("ppo"))


def grpo_checks() -> int:
    return len(cases("grpo"))


def passed_beside(failed: int, checks: int) -> int:
    """The passed count of a gate run's last line: the checks that did not fail."""
    return checks - failed


def metric_path() -> tuple[int]:
    """docs/architecture.md's path of one GRPO metric: the files its table's second column says the number crosses
    from the record to the terminal line, at most about 15 (issue: the core knows no algorithm); every file any
    cell names must exist, so a moved module fails here."""
    text = (ROOT / "docs/architecture.md").read_text(encoding="utf-8")
    section = text[text.index("## The path of one GRPO metric") :]
    section = section[: section.index("\n## ", 1)]
    rows = [line.split("|")[1:-1] for line in section.splitlines() if re.match(r"\| \d+ \|", line)]
    for path in {p for row in rows for cell in row for p in re.findall(r"`([\w/]+\.py)`", cell)}:
        assert (ROOT / path).is_file() or (ROOT / "harness" / path).is_file(), f"architecture.md names {path}"
    crossed = [p for row in rows for p in re.findall(r"`([\w/]+\.py)`", row[1])]
    assert len(crossed) == len(set(crossed)) and len(crossed) <= 15, crossed
    return (len(crossed),)


N = r"(\d+|" + "|".join(WORDS) + r")"
COUNTS = (
    # (doc, the statement with each count a group, the true value of each group)
    ("README.md", rf"`PPOTrainer` fails {N} of the {N} PPO checks", lambda: (len(TRL_FAILS), ppo_checks())),
    ("README.md", rf"`GRPOTrainer` fails {N} of the {N} GRPO checks, the same {N} on 1\.12\.0",
     lambda: (len(TRL_GRPO_FAILS), grpo_checks(), len(TRL_NEWEST_FAILS))),  # fmt: skip
    ("docs/trl.md", rf"^    {N} failed, {N} passed in [\d.]+s$",
     lambda: (len(TRL_FAILS), passed_beside(len(TRL_FAILS), ppo_checks()))),  # fmt: skip
    ("docs/trl-grpo.md", rf"exits 1, failing {N} of the {N} checks", lambda: (len(TRL_GRPO_FAILS), grpo_checks())),
    ("docs/trl-grpo.md", rf"`{N} failed, {N} passed in [\d.]+s`,\s+counts the checks by outcome",
     lambda: (len(TRL_GRPO_FAILS), passed_beside(len(TRL_GRPO_FAILS), grpo_checks()))),  # fmt: skip
    ("docs/trl-grpo.md", rf"\| 1\.1[2346]\.\d \| 1 \| {N}: the", lambda: (len(TRL_NEWEST_FAILS),)),
    ("docs/trl-grpo.md", rf"The {N} are `uneven_lengths\[loss_type=\*\]` \({N}\), `off_policy\[loss_type=\*\]` \({N}\)",
     lambda: (len(TRL_NEWEST_FAILS), sum(c.startswith("uneven_lengths[") for c in TRL_NEWEST_FAILS),
              sum(c.startswith("off_policy[") for c in TRL_NEWEST_FAILS))),  # fmt: skip
    ("docs/trl-grpo.md", rf"`baselines/trl-1\.16\.0-grpo\.toml` lists the {N}",
     lambda: (len(baseline("trl-1.16.0-grpo.toml", "grpo")),)),  # fmt: skip
    ("docs/trl-grpo.md", rf"the same {N} failures", lambda: (len(TRL_NEWEST_FAILS),)),
    ("docs/tolerances.md", rf"fails the same {N} (?:GRPO )?checks as float32",
     lambda: (len(TRL_GRPO_FAILS - HALF_PRECISION_NOT_APPLICABLE),)),  # fmt: skip
    ("docs/using-the-gate.md", rf"`baselines/trl-1\.12\.0-grpo\.toml` lists the {N} GRPO checks",
     lambda: (len(baseline("trl-1.12.0-grpo.toml", "grpo")),)),  # fmt: skip
    ("docs/using-the-gate.md", rf"`baselines/trl-1\.12\.0-ppo\.toml` the {N} PPO checks",
     lambda: (len(baseline("trl-1.12.0-ppo.toml", "ppo")),)),  # fmt: skip
    ("docs/using-the-gate.md", rf"`GRPO statistics verify: PASS \({N} known failures\)`",
     lambda: (len(baseline("trl-1.12.0-grpo.toml", "grpo")),)),  # fmt: skip
    ("docs/using-the-gate.md", rf"`{N} passed, {N} xfailed in [\d.]+s`",
     lambda: (passed_beside(len(TRL_GRPO_FAILS), grpo_checks()), len(baseline("trl-1.12.0-grpo.toml", "grpo")))),
    ("docs/using-the-gate.md", rf"the other {N} entries did not run",
     lambda: (len(baseline("trl-1.12.0-grpo.toml", "grpo")) - 1,)),  # fmt: skip
    ("docs/architecture.md", rf"From the record to the terminal line the number crosses {N} files", metric_path),
    *((doc, rf"\b{N} (?:of TRL's )?loss types", lambda: (len(LOSS_TYPES),))
      for doc in ("README.md", "docs/bug-catalogue.md", "docs/gate.md", "docs/grpo-metrics.md")),  # fmt: skip
)


def number(said: str) -> int:
    return WORDS[said] if said in WORDS else int(said)


def text_of(doc: str, pattern: str) -> str:
    """The doc, its prose with each paragraph on one line (a statement may break across lines); a pattern anchored
    at line starts reads the lines as they are."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    return text if pattern.startswith("^") else " ".join(text.split())


@pytest.mark.parametrize("doc, pattern, truth", COUNTS, ids=[f"{d}:{p[:40]}" for d, p, _ in COUNTS])
def test_the_docs_count_is_its_sources(doc, pattern, truth):
    found = re.findall(pattern, text_of(doc, pattern), flags=re.M)
    assert found, f"{doc} no longer says {pattern!r}: change the statement here with the doc's"
    want = truth()
    for said in found:
        said = (said,) if isinstance(said, str) else said
        assert tuple(number(s) for s in said) == want, f"{doc}: {pattern!r} says {said}, its sources say {want}"


def test_trls_baselines_are_the_pinned_verdicts():
    """The committed baselines list exactly the checks the verdict tests pin (docs/using-the-gate.md, "TRL's
    baselines"): a baseline that drifts from its verdict would be a count the docs cannot keep."""
    assert baseline("trl-1.12.0-ppo.toml", "ppo") == TRL_FAILS
    assert baseline("trl-1.12.0-grpo.toml", "grpo") == TRL_GRPO_FAILS
    assert baseline("trl-1.16.0-grpo.toml", "grpo") == TRL_NEWEST_FAILS
