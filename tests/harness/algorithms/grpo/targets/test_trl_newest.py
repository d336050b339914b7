"""The GRPO gate's verdict on TRL's newest pinned release (1.16.0), whose GRPOTrainer computes its log-probs and
entropies with a fused LM head: the adapter records them at the head's boundary.

Runs where trl 1.16.0 is what the gate's processes import: in `nox -s tests`, whose venv has trl 1.12.0 and keeps
1.16.0 in a folder of its own (`pip install --no-deps --target`, named by PPO_HARNESS_TRL_NEWEST), put first on
the `PYTHONPATH` of this module's gate processes; and in `nox -s trl_newest`, whose venv has 1.16.0 installed. It
skips elsewhere (tests/harness/algorithms/grpo/targets/test_trl_grpo_verdict.py pins 1.12.0's verdict). One
`python -m harness verify --target trl-grpo` run as a user would (a subprocess, its exit code, its JSON report), then
TRL's baseline (baselines/trl-1.16.0-grpo.toml) on it and on patched copies of its trainer module, through
`--target trl-grpo:MODULE`: one that adds a bug (a new failure: exit 1), one that fixes a baselined one (the entry is
stale: exit 1, naming it), one that divides dr_grpo by the padded width (class 93: one new failure), and one that
takes dapo's count once per optimizer step (class 94: one new failure, in windows across generations).
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.algorithms import cases
from harness.algorithms.grpo.spec import LOSS_TYPES
from tests.support.gate_run import verify
from tests.support.trl_copies import COPY, copy_trl_grpo_trainer

pytestmark = [pytest.mark.trl, pytest.mark.slow]

RELEASE = "1.16.0"
# The same 24 checks as TRL 1.12.0 (docs/trl-grpo.md, "TRL releases"): its poolings did not change. Its log-probs
# and entropies, read at the fused head, equal their float64 formulas (logit_recompute passes), and the networks' own
# forward (forward_recompute passes).
TRL_NEWEST_FAILS = {
    *(f"uneven_lengths[loss_type={t}]" for t in LOSS_TYPES),
    *(f"off_policy[loss_type={t}]" for t in ("cispo", "sapo", "vespo")),
    "short_window",
    "extremes",
    "freshness",
    "all_masked",
    "partition",
    "partition[dropout=0.1]",
    "partition[run=clipping]",
    "reward_stats[scale_rewards=batch]",
    "schedule",
    "extremes[run=sequence_level]",
    "extremes[run=clip_asymmetric]",
    "extremes[run=sequence_level,loss_type=cispo]",
    "extremes[run=sequence_level,loss_type=vespo]",
    "entropy_gradient",  # its entropy bonus's _compute_loss is 1.12.0's
    "entropy_gradient[run=top_entropy]",  # the same under the entropy mask
    "entropy_gradient[run=adaptive]",  # and under adaptive entropy control, its coefficients the contract's
}
ROOT = Path(__file__).resolve().parents[5]
BASELINE = ROOT / "baselines" / f"trl-{RELEASE}-grpo.toml"


FOLDER = Path(os.environ["PPO_HARNESS_TRL_NEWEST"]) if os.environ.get("PPO_HARNESS_TRL_NEWEST") else None
"""A folder that holds a TRL release apart from this venv's (`nox -s tests` names it), or None."""


def _installed() -> str | None:
    """The TRL release this module's gate processes import: the folder's when there is one, else the venv's."""
    if FOLDER is not None:
        found = [d.version for d in importlib.metadata.distributions(path=[str(FOLDER)]) if d.name == "trl"]
        return found[0] if found else None
    try:
        return importlib.metadata.version("trl")
    except importlib.metadata.PackageNotFoundError:
        return None


NOT_HERE = "trl {} is what the gate would import, not " + RELEASE + ": nox -s tests (or trl_newest) runs this module"


@pytest.fixture(scope="module", autouse=True)
def newest_first_on_the_path():
    """Every test of this module skips where the gate would import another release; the folder first on the
    PYTHONPATH of the gate processes this module starts (tests/support/gate_run.py keeps an inherited
    PYTHONPATH after the project), for this module's tests only."""
    if _installed() != RELEASE:
        pytest.skip(NOT_HERE.format(_installed()))
    if FOLDER is None:
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join([str(FOLDER), *filter(None, [os.environ.get("PYTHONPATH")])]))
        patch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
        yield


@pytest.fixture(scope="module")
def newest_verdict(tmp_path_factory):
    return verify(tmp_path_factory.mktemp("verify-trl-newest"), "--target", "trl-grpo", timeout=600)


def test_the_gate_processes_import_the_newest_release():
    """What this module's gate processes import is the release it pins (its verdict is 1.12.0's list too)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))  # as gate_run.verify's
    probe = "import importlib.metadata as m, trl; print(m.version('trl'), trl.__version__)"
    done = subprocess.run([sys.executable, "-c", probe], env={**os.environ, "PYTHONPATH": path}, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.stdout.split() == [RELEASE, RELEASE], done.stdout + done.stderr


def test_trl_newest_exits_1_and_fails_exactly_the_pinned_checks(newest_verdict):
    code, report, output = newest_verdict
    assert code == 1, output[-3000:]
    statuses = {check["id"]: check["status"] for check in report["checks"]}
    assert {c for c, s in statuses.items() if s != "pass"} == TRL_NEWEST_FAILS
    assert len(statuses) == len(cases("grpo"))  # every check of the GRPO gate ran


def test_trl_newest_fused_head_log_probs_equal_their_float64_formulas(newest_verdict):
    _, report, _ = newest_verdict
    (check,) = [c for c in report["checks"] if c["id"] == "logit_recompute"]
    assert check["status"] == "pass", check["message"]
    assert {m["name"] for m in check["metrics"]} == {"logit_gap/logps", "logit_gap/entropies"}
    assert all(m["logged"] < 1e-5 for m in check["metrics"])


def test_trls_baseline_lists_exactly_the_newest_releases_failures(newest_verdict):
    """The committed baseline is today's verdict: with it the same run exits 0 (every failure known, none stale)."""
    from harness.baseline import load

    _, report, _ = newest_verdict
    failed = [c["id"] for c in report["checks"] if c["status"] == "fail"]
    assert {e.check for e in load(BASELINE, "grpo").entries} == set(failed) == TRL_NEWEST_FAILS


def patched_copy(root: Path, old: str, new: str) -> Path:
    """TRL's trainer module copied as `patched_trl_grpo.grpo_trainer` under `root`, with `old` replaced by `new`."""
    copy_trl_grpo_trainer(root, FOLDER)
    path = root / "patched_trl_grpo" / "grpo_trainer.py"
    text = path.read_text()
    assert text.count(old) == 1, f"TRL {RELEASE}'s trainer no longer has {old!r}"
    path.write_text(text.replace(old, new))
    return root


# Two checks of the baseline's run: one TRL fails (known), one it passes. Run alone, the entries of the checks not
# run are neither known nor stale.
CHECKS = ("reward_stats[scale_rewards=batch]", "advantages[scale_rewards=group]")
GROUP_STD = "is_std_zero = torch.isclose(std_rewards, torch.zeros_like(std_rewards))  # for logging\n\n        elif"


@pytest.mark.parametrize("patch", ["none", "adds a bug", "fixes a baselined one"])
def test_with_trls_baseline_the_gate_fails_only_for_what_changed(tmp_path, patch):
    target, root = "trl-grpo", None
    if patch == "adds a bug":  # advantages over a std 0.1 too large: a failure the baseline does not know
        root = patched_copy(tmp_path / "src", "advantages = advantages / (std_rewards + 1e-4)",
                            "advantages = advantages / (std_rewards + 1e-1)")  # fmt: skip
    elif patch == "fixes a baselined one":  # frac_reward_zero_std tests each group's std under batch scaling too
        root = patched_copy(
            tmp_path / "src",
            GROUP_STD,
            (
                "is_std_zero = torch.isclose(std_rewards, torch.zeros_like(std_rewards))  # for logging\n"
                "            if self.scale_rewards == 'batch':\n"
                "                group_std = nanstd(rewards.view(-1, num_generations), dim=1)\n"
                "                group_std = group_std.repeat_interleave(num_generations, dim=0)\n"
                "                is_std_zero = torch.isclose(group_std, torch.zeros_like(group_std))\n\n        elif"
            ),
        )
    if root is not None:
        target = f"trl-grpo:{COPY}"
    checks = [arg for check in CHECKS for arg in ("--check", check)]
    code, report, output = verify(tmp_path / "out", "--target", target, *checks, "--baseline", str(BASELINE),
                                  pythonpath=root)  # fmt: skip
    statuses = {c["id"]: c["status"] for c in report["checks"]}
    if patch == "none":
        assert code == 0, output[-3000:]
        assert statuses == dict(zip(CHECKS, ("fail", "pass"))) and report["baseline"]["known"] == [CHECKS[0]]
    elif patch == "adds a bug":
        assert code == 1, output[-3000:]
        assert statuses == dict(zip(CHECKS, ("fail", "fail"))) and report["baseline"]["known"] == [CHECKS[0]]
        assert f"\nFAIL  {CHECKS[1]}" in output
    else:
        assert code == 1, output[-3000:]
        assert statuses == dict(zip(CHECKS, ("pass", "pass"))) and report["baseline"]["stale"] == [CHECKS[0]]
        assert f"STALE {CHECKS[0]}  passes: remove it from the baseline {BASELINE}" in output


DR_GRPO = "loss = (per_token_loss * mask).sum() / (per_token_loss.size(0) * self.max_completion_length)"
DAPO = 'normalizer = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes'
ONCE_PER_STEP = ('if getattr(self, "_items_at", None) != self.state.global_step:\n'
                 '                self._items_at, self._items = self.state.global_step, inputs["num_items_in_batch"]\n'
                 '            normalizer = self._items.clamp(min=1.0) / self.accelerator.num_processes')  # fmt: skip
REGIME_SLIPS = {
    # dr_grpo divided by the width its generation is padded to, its longest completion: at 12 some completion of
    # each generation reaches the limit (seed 0), so only the short completions' run shows it
    93: (DR_GRPO, DR_GRPO.replace("self.max_completion_length", "per_token_loss.size(1)"),
         ("logp_gradient[loss_type=dr_grpo]", "logp_gradient[run=short_completions]")),
    # dapo's count kept from each optimizer step's first micro-batch: windows that end with their generation cannot
    # tell it from each micro-batch's own generation's, so only the windows across generations show it
    94: (DAPO, ONCE_PER_STEP, ("logp_gradient[run=short_window]", "logp_gradient[run=across_generations]")),
}


@pytest.mark.parametrize("bug_class", sorted(REGIME_SLIPS))
def test_a_slip_only_its_regime_shows_fails_that_case_alone_diagnosed(tmp_path, bug_class):
    """Slips TRL's own code invites, each visible in one regime only (REGIME_SLIPS): under TRL's baseline, at seed 0,
    the case of the ordinary regime passes the patched copy and the regime's own case fails it, diagnosed as the
    slip's class."""
    old, slip, checks = REGIME_SLIPS[bug_class]
    root = patched_copy(tmp_path / "src", old, slip)
    code, report, output = verify(tmp_path / "out", "--target", f"trl-grpo:{COPY}",
                                  *(arg for check in checks for arg in ("--check", check)),
                                  "--baseline", str(BASELINE), pythonpath=root)  # fmt: skip
    assert code == 1, output[-3000:]
    assert {c["id"]: c["status"] for c in report["checks"]} == dict(zip(checks, ("pass", "fail"))), output[-3000:]
    (failed,) = [c for c in report["checks"] if c["status"] == "fail"]
    diagnosed = [m["diagnosis"] for m in failed["metrics"] if m.get("failed") and m.get("diagnosis")]
    assert diagnosed and diagnosed[0]["classes"] == [bug_class], failed["metrics"]
