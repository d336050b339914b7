"""The GRPO gate's verdict on TRL's newest pinned release (1.16.0), whose GRPOTrainer computes its log-probs and
entropies with a fused LM head: the adapter records them at the head's boundary.

Runs where trl 1.16.0 is installed (`nox -s trl_newest`, which `nox -s tests` notifies); skips elsewhere (the
`tests` session's venv has trl 1.12.0, whose verdict tests/test_trl_grpo_verdict.py pins). One
`python -m harness verify --target trl-grpo` run as a user would (a subprocess, its exit code, its JSON report).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.trl

RELEASE = "1.16.0"
# The same 13 checks as TRL 1.12.0 (docs/trl-grpo.md, "TRL releases"): its poolings did not change. Its log-probs
# and entropies, read at the fused head, equal their float64 formulas (logit_recompute passes).
TRL_NEWEST_FAILS = {
    *(f"uneven_lengths[loss_type={t}]" for t in ("grpo", "bnpo", "dr_grpo", "dapo")),
    "short_window",
    "extremes",
    "freshness",
    "all_masked",
    "partition",
    "partition[dropout=0.1]",
    "gradient_partition[loss_type=bnpo]",
    "logp_gradient[loss_type=bnpo]",
    "reward_stats[scale_rewards=batch]",
}


def _installed() -> str | None:
    try:
        return importlib.metadata.version("trl")
    except importlib.metadata.PackageNotFoundError:
        return None


@pytest.fixture(scope="module")
def newest_verdict(tmp_path_factory):
    if _installed() != RELEASE:
        pytest.skip(f"trl {_installed()} is installed, not {RELEASE}: nox -s trl_newest runs this module")
    out = tmp_path_factory.mktemp("verify-trl-newest")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GITHUB_STEP_SUMMARY": "", "TRL_EXPERIMENTAL_SILENCE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "verify", "--target", "trl-grpo", "--report-dir", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    report = json.loads((out / "verify.json").read_text()) if (out / "verify.json").exists() else {}
    return proc.returncode, report, proc.stdout + proc.stderr


def test_trl_newest_exits_1_and_fails_exactly_the_pinned_checks(newest_verdict):
    code, report, output = newest_verdict
    assert code == 1, output[-3000:]
    statuses = {check["id"]: check["status"] for check in report["checks"]}
    assert {c for c, s in statuses.items() if s != "pass"} == TRL_NEWEST_FAILS
    assert len(statuses) == 33


def test_trl_newest_fused_head_log_probs_equal_their_float64_formulas(newest_verdict):
    _, report, _ = newest_verdict
    (check,) = [c for c in report["checks"] if c["id"] == "logit_recompute"]
    assert check["status"] == "pass", check["message"]
    assert {m["name"] for m in check["metrics"]} == {"logit_gap/logps", "logit_gap/entropies"}
    assert all(m["logged"] < 1e-5 for m in check["metrics"])
