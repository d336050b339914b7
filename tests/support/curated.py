"""The curated catalogue run end to end, one algorithm's mutants at a time, as `python -m mutants curated
--only ...` runs them: every mutant against the checks it names, beside its algorithm's controls (the whole gate
and the two-process run on the unmodified copy).

One module per algorithm (tests/mutants/test_curated_ppo.py, test_curated_grpo.py), so that pytest-xdist, which
hands out whole modules, runs the two halves on two workers; each half then runs its gates one at a time (two
at a time when the suite runs in one process), so the suite never has more gate processes than CPUs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mutants import catalogue, runner
from mutants.controls import CONTROLS


def jobs() -> int:
    """Gate processes at a time: the CPUs shared among the pytest-xdist workers (all of them in one process)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return max(1, (os.cpu_count() or 1) // workers)


def run_algorithm(algorithm: str, report_dir: Path, capsys) -> dict[str, dict]:
    """Run every curated mutant of `algorithm` and its controls; assert each mutant killed by a check it names
    and every control passed; the mutants' records of curated.json by id (`capsys`: the runner's table, shown when
    a mutant survived)."""
    ids = [m.id for m in catalogue.MUTANTS if m.algorithm == algorithm]
    assert ids, f"the catalogue has no {algorithm} mutant"
    code = runner.run_curated(ids, jobs=jobs(), report_dir=report_dir)
    data = json.loads((report_dir / "curated.json").read_text(encoding="utf-8"))
    expected = {name for name, (_, of) in CONTROLS.items() if of == algorithm}
    assert set(data["controls"]) == expected  # its whole gate and its two-process run, no other algorithm's
    for name in expected:
        assert data["controls"][name]["passed"], data["controls"][name]["reason"]
    by_id = {r["id"]: r for r in data["mutants"]}
    assert {i: by_id[i]["status"] for i in ids} == {i: "killed" for i in ids}, capsys.readouterr().out
    assert all(by_id[i]["named_failed"] for i in ids)  # each killed by a check it names
    assert code == 0
    return by_id
