"""Contract versions: each change of a contract is said, in one line naming its changelog entry, on the failing
checks of a target that may predate it; a target written for release 0.1.0, frozen, judged by today's gate."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.algorithms import get, known_algorithms
from harness.contract import Change, Contract, with_changes
from harness.errors import HarnessConfigError
from harness.report.format import check_failure_lines
from harness.verdict import CheckId, CheckResult, CheckStatus
from tests.support import forked
from tests.support.gate_run import verify

ROOT = Path(__file__).resolve().parents[2]
SUPPORT = ROOT / "tests" / "support"
OLD_TARGET = "release_0_1_0.grpo010.target:factory"
"""Release 0.1.0's reference GRPO trainer and target, frozen (tests/support/release_0_1_0)."""
NEW_LOSS_TYPES = ("cispo", "sapo", "luspo", "vespo")
AGGREGATED = tuple(f"{name}[multi_objective_aggregation=normalize_then_sum]" for name in ("advantages", "reward_stats"))

A = Change(2, "0.2.0", "a", "old a", "new a", ("alpha*",))
B = Change(3, "0.3.0", "b", "old b", "new b", ("*beta*",))
TOY = Contract(version=3, document="docs/toy.md", changes=(A, B))


def changelog_sections() -> dict[str, str]:
    """CHANGELOG.md's text under each `## [X.Y.Z]` heading."""
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    parts = re.split(r"^## \[([^\]]+)\][^\n]*$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_a_target_hears_of_the_changes_it_may_predate_and_no_other():
    assert TOY.lines("toy", "alpha[x=1]", pinned=None) == [A.line("toy")]  # pins nothing: may predate every one
    assert TOY.lines("toy", "alpha[x=1]", pinned=1) == [A.line("toy")]
    assert TOY.lines("toy", "alpha[x=1]", pinned=2) == []  # written for the version that made it
    assert TOY.lines("toy", "gamma[beta=2]", pinned=2) == [B.line("toy")]
    assert TOY.lines("toy", "gamma", pinned=None) == []  # touched by none
    line = A.line("toy")
    assert "TOY contract 2" in line and "release 0.2.0" in line and "CHANGELOG.md" in line
    assert "it was old a; it is new a" in line


def test_the_lines_ride_on_a_failed_check_only_and_change_no_verdict():
    failed = CheckResult(CheckId("alpha"), CheckStatus.FAIL, problems=("logged 1, expected 2",))
    passed = CheckResult(CheckId("alpha"), CheckStatus.PASS)
    annotated = with_changes(failed, "toy", TOY, None)
    assert annotated.status is CheckStatus.FAIL and annotated.problems == failed.problems
    assert annotated.contract_changes == (A.line("toy"),)
    assert check_failure_lines(annotated)[-1] == A.line("toy")  # its own line, after the check's
    assert annotated.as_dict()["contract_changes"] == [A.line("toy")]
    assert with_changes(passed, "toy", TOY, None) is passed
    assert with_changes(failed, "toy", TOY, 3) is failed


@pytest.mark.parametrize("pin", [0, 4, "2", 2.0, True])
def test_a_pin_that_is_not_a_version_is_refused(pin):
    with pytest.raises(ValueError, match="contract_version"):
        TOY.check_pin(pin, "t")


def test_a_contract_refuses_a_change_outside_its_versions():
    with pytest.raises(ValueError, match="outside"):
        Contract(version=2, document="d", changes=(B,))


def test_resolve_reads_the_pin_and_refuses_a_bad_one(monkeypatch):
    import types

    from harness import targets

    module = types.ModuleType("pinned_target")

    def factory(spec):
        raise AssertionError("not built")

    factory.algorithm = "grpo"
    factory.contract_version = 1
    module.factory = factory
    monkeypatch.setitem(sys.modules, "pinned_target", module)
    assert targets.resolve("pinned_target:factory").contract_version == 1
    factory.contract_version = get("grpo").contract.version + 1
    with pytest.raises(HarnessConfigError, match="contract version from 1 to"):
        targets.resolve("pinned_target:factory")
    del factory.contract_version
    assert targets.resolve("pinned_target:factory").contract_version is None


@pytest.mark.parametrize("name", known_algorithms())
def test_every_change_has_its_changelog_entry(name):
    sections = changelog_sections()
    for change in get(name).contract.changes:
        assert change.release in sections, f"{name}: CHANGELOG.md has no [{change.release}] for {change.subject}"
        assert change.subject in sections[change.release], f"[{change.release}] does not name {change.subject!r}"


def test_version_prints_the_package_and_each_contract():
    out = forked.run([sys.executable, "-m", "harness", "--version"], cwd=ROOT, timeout=120, check=True).stdout
    out = out.splitlines()
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert out[0] == f"ppo-stats-harness {version}" and version != "0.1.0"
    assert f"## [{version}]" in (ROOT / "CHANGELOG.md").read_text()
    contracts = {n: get(n).contract for n in known_algorithms()}
    assert out[1:] == [f"contract {n} {c.version} ({c.document})" for n, c in contracts.items()]


@pytest.mark.parametrize("module, new", [("reference_ppo", "reference_trainers")])
def test_an_old_import_path_warns_once_naming_the_new_one(module, new):
    code = f"import {module}\nimport {module}\n"
    proc = subprocess.run([sys.executable, "-W", "default::DeprecationWarning", "-c", code], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "DeprecationWarning" in line]
    assert len(warnings) == 1 and f"{module} is deprecated" in warnings[0] and new in warnings[0], proc.stderr
    assert warnings[0].startswith("<string>:1:")  # it points at the user's import, not at the harness


@pytest.mark.slow
def test_a_new_loss_type_a_0_1_0_target_cannot_build_names_its_changelog_entry(tmp_path):
    """The 0.1.0 trainer refuses cispo (its configuration knows four loss types): the check errs, its configuration
    error says which contract change added it, and the run ends naming the check that could not be configured."""
    code, report, out = verify(tmp_path, "--target", OLD_TARGET, "--check", "uneven_lengths[loss_type=cispo]",
                          pythonpath=SUPPORT)  # fmt: skip
    assert code == 2, out
    said = [line for line in out.splitlines() if line.startswith("CONFIG ERROR")]
    erred = [line for line in out.splitlines() if line.startswith("ERROR ")]  # the check's own line says why
    assert len(erred) == 1 and "got 'cispo'" in erred[0], out
    assert "GRPO contract 2 (release 0.2.0, CHANGELOG.md) changed the loss types" in erred[0]
    assert len(said) == 1, out
    assert said[0].startswith("CONFIG ERROR 1 check could not be configured: uneven_lengths[loss_type=cispo]; ")
    assert [c["status"] for c in report["checks"]] == ["error"] and "got 'cispo'" in report["checks"][0]["message"]


@pytest.mark.slow
def test_a_target_written_for_0_1_0_fails_only_where_the_contract_changed(tmp_path):
    """Release 0.1.0's reference GRPO trainer and target, frozen, against today's gate (every check but those of the
    four loss types it cannot build, above): each failure is a change of GRPO contract 2 or 4 it predates, named in
    one line with its changelog entry; bnpo's are diagnosed as contract 1's bnpo. It really has none of today's
    duties, holds bnpo to contract 1's definition and knows neither sequence-level ratios, truncated completions left
    out nor the entropy mask (nor, so, the regimes of contract 7); it has no other defect, and the gate finds none."""
    every = forked.run([sys.executable, "-m", "harness", "checks", "--target", "reference-grpo"], cwd=ROOT,
                       timeout=120, check=True).stdout.split()  # fmt: skip
    runnable = [c for c in every if not any(f"loss_type={t}" in c for t in NEW_LOSS_TYPES)]
    assert len(every) - len(runnable) == 27  # 4 more of contract 8's short windows (cispo, sapo, luspo, vespo)
    code, report, out = verify(tmp_path, "--target", OLD_TARGET, *(f"--check={c}" for c in runnable),
                               pythonpath=SUPPORT)  # fmt: skip
    assert code == 1, out
    failed = {c["id"]: c for c in report["checks"] if c["status"] != "pass"}
    duties = {"reward_model", "reward_inputs", "forward_recompute", "sampling"}
    bnpo = {"uneven_lengths[loss_type=bnpo]", "logp_gradient[loss_type=bnpo]"}
    # the options contract 4 runs (release 0.5.0), which its trainer does not know: it trains token-level ratios
    # and every completion, truncated or not
    options = {"logp_gradient[run=sequence_level]", "extremes[run=sequence_level]",
               "completion_mask[mask_truncated_completions=True]"}  # fmt: skip
    # and the option contract 6 runs (release 0.6.0): it keeps every token's policy term, whatever the entropy
    masked = {"logp_gradient[run=top_entropy]"}
    # and the regimes contract 7 runs (release 0.7.0): delta's cap on the completion's ratio, the mask in bfloat16,
    # the reward functions normalised one by one (it sums them first), the entropy bonus (it has none: no gradient
    # reaches its entropies, so the case is not recomputable, never passed)
    regimes = {"logp_gradient[run=delta,importance_sampling_level=sequence]",
               "logp_gradient[run=top_entropy,dtype=bfloat16]", "entropy_gradient", *AGGREGATED}  # fmt: skip
    # and contract 8's cases (release 0.8.0) that earlier changes touch too, each change named with its own release:
    # the reward model's run under normalize_then_sum (its duty, the aggregation, the weights), bnpo's short window,
    # the forward recompute's duty on left-padded prompts, the reward checks with the functions in another order (its
    # target hands them in the listed order: both fail, saying so), the entropy bonus under the mask (it has none)
    weights = {"reward_model[multi_objective_aggregation=normalize_then_sum]",
               "logp_gradient[run=short_window,loss_type=bnpo]", "forward_recompute[prompt_pads=3]",
               "advantages[reward_order=reversed]", "reward_stats[reward_order=reversed]",
               "entropy_gradient[run=top_entropy]"}  # fmt: skip
    # and contract 9's learning-rate schedule (release 0.9.0): its trainer runs a constant rate without decay, and
    # (contract 12, release 0.12.0) AdamW at betas and eps of its own
    scheduled = {"lr_schedule"}
    # and contract 10's windows across generations (release 0.10.0): each of its windows ends with its generation,
    # so the run shows none that holds two (the case fails, saying so)
    spanning = {"logp_gradient[run=across_generations]"}
    # and contract 13's off-policy sequence mask and adaptive entropy control (release 0.13.0): it keeps every
    # completion's policy term, and has no entropy bonus (no gradient reaches its entropies: not recomputable)
    off_policy = {"logp_gradient[run=off_policy_mask]", "entropy_gradient[run=adaptive]",
                  "entropy_gradient[run=adaptive_gated]"}
    assert set(failed) == (duties | bnpo | options | masked | regimes | weights | scheduled | spanning
                           | off_policy), sorted(failed)
    contract = get("grpo").contract
    for check_id in weights:
        lines = failed.pop(check_id)["contract_changes"]
        assert any("(release 0.8.0, CHANGELOG.md)" in line for line in lines), lines
        assert set(lines) <= {c.line("grpo") for c in contract.changes}, lines
    lines = failed.pop("lr_schedule")["contract_changes"]
    assert [line.split(") changed")[0].split("(")[-1] for line in lines] == ["release 0.9.0, CHANGELOG.md",
                                                                             "release 0.12.0, CHANGELOG.md"], lines
    for check_id, check in failed.items():
        assert check["contract_changes"], check_id
        release = {**dict.fromkeys(off_policy, "0.13.0"), **dict.fromkeys(spanning, "0.10.0"),
                   **dict.fromkeys(scheduled, "0.9.0"), **dict.fromkeys(regimes, "0.7.0"),
                   **dict.fromkeys(masked, "0.6.0"), **dict.fromkeys(options, "0.5.0")}.get(check_id, "0.2.0")
        for line in check["contract_changes"]:
            assert f"(release {release}, CHANGELOG.md)" in line and line in {c.line("grpo") for c in contract.changes}
    for check_id in bnpo:
        diagnosed = [m["diagnosis"] for m in failed[check_id]["metrics"] if m.get("failed") and m.get("diagnosis")]
        noted = failed[check_id]["message"]
        assert any("contract 1's bnpo" in d["formula"] and d["classes"] == [14] for d in diagnosed) or (
            "contract 1's bnpo" in noted and "(class 14)" in noted
        ), failed[check_id]
