"""The README's check counts are the registry's: a scenario or sweep point added or removed fails here until the
README says the new number (the counts are read from the code, never typed twice)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.algorithms import cases

README = Path(__file__).resolve().parents[2] / "README.md"
COUNT = re.compile(r"fails \d+ of the (\d+) (PPO|GRPO) checks")


def stated() -> dict[str, int]:
    """Algorithm name -> the number of its checks the README states."""
    text = " ".join(README.read_text(encoding="utf-8").split())
    return {name.lower(): int(count) for count, name in COUNT.findall(text)}


@pytest.mark.parametrize("name", ["ppo", "grpo"])
def test_the_readme_states_each_gates_number_of_checks(name):
    live = len(cases(name))
    assert stated().get(name) == live, (
        f"README.md should say the {name.upper()} gate has {live} checks "
        f"(`python -m harness checks --target ...` lists them); it says {stated().get(name)}"
    )
