"""The pytest plugin as a user meets it: options in the header, the spy fixture, the report files."""

from __future__ import annotations

pytest_plugins = ["pytester"]


def test_header_names_target_seed_and_device(pytester):
    pytester.makepyfile("def test_nothing_to_see():\n    assert 1 + 1 == 2\n")
    result = pytester.runpytest("--ppo-target=trl", "--ppo-seed=7")
    result.stdout.fnmatch_lines(["ppo-stats-harness: target=trl seed=7 device=cpu dtype=float32"])
    assert result.ret == 0


def test_ppo_spy_fixture_records_the_trainer_and_is_undone(ppo_spy):
    import torch

    from reference_trainers import ppo as trainer

    real = trainer.masked_mean
    with ppo_spy(trainer) as spy:
        mean = trainer.masked_mean(torch.tensor([1.0, 2.0, 4.0]), torch.tensor([True, False, True]))
        assert trainer.masked_mean is not real
    assert trainer.masked_mean is real
    assert mean.item() == 2.5
    (record,) = spy.calls(fn="masked_mean")
    assert record.site.name == "mean" and record.values.tolist() == [1.0, 2.0, 4.0]


def test_a_failing_check_writes_the_reports(pytester):
    pytester.makepyfile(
        """
        from harness.verdict import Check, CheckId

        def test_check(ppo_report):
            check = Check(CheckId("demo"))
            check.fail("logged 0.5, expected 1")
            ppo_report.add(check.finish())
            assert False
        """
    )
    result = pytester.runpytest(f"--ppo-report-dir={pytester.path / 'out'}")
    assert result.ret == 1
    assert (pytester.path / "out" / "verify.json").exists() and (pytester.path / "out" / "verify.md").exists()
    result.stdout.fnmatch_lines(["*ppo-stats-harness verdict*"])


def test_verdict_is_one_line_per_check_and_lists_other_failures_when_tracebacks_are_off(pytester):
    pytester.makepyfile(
        """
        from harness.verdict import Check, CheckId

        def test_check(ppo_report):
            ppo_report.add(Check(CheckId("demo")).finish())

        def test_plain():
            assert 1 == 2, "plain failure"
        """
    )
    result = pytester.runpytest("--tb=no", "-q")
    result.stdout.fnmatch_lines(["pass  demo", "FAIL  test_*.py::test_plain  assert 1 == 2*"])
    assert "check  metric" not in result.stdout.str()
    verbose = pytester.runpytest("--ppo-verbose")  # tracebacks on: the failure is in pytest's own section
    verbose.stdout.fnmatch_lines(["check*metric*logged*"])
    assert "FAIL  test_" not in verbose.stdout.str()


def test_a_cuda_device_the_machine_lacks_stops_the_session_rather_than_skipping(pytester):
    """A gate that ran nothing must not pass: `--ppo-device=cuda` without CUDA is a configuration error of the
    session (exit 2), where the plugin once skipped every check."""
    import torch

    if torch.cuda.is_available():
        import pytest

        pytest.skip("this machine has CUDA")
    pytester.makepyfile("def test_spec(ppo_run_spec):\n    assert ppo_run_spec is not None\n")
    result = pytester.runpytest("--ppo-device=cuda")
    assert result.ret == 2
    result.stdout.fnmatch_lines(["*CONFIG ERROR --device cuda but torch * sees no CUDA device*"])


def test_a_target_that_cannot_be_built_stops_the_session_saying_so_once(pytester):
    """The session's gate builds its target before the first check runs it, as `ppo-verify` does: a factory that
    raises a configuration error is one error, exit 2, not one per check."""
    pytester.makepyfile(
        unbuildable="""
        from harness.errors import HarnessConfigError

        def factory(spec):
            raise HarnessConfigError("unbuildable: this trainer cannot be built")

        factory.algorithm = "grpo"
        """
    )
    pytester.syspathinsert()
    result = pytester.runpytest("--pyargs", "harness.suite", "--ppo-target=unbuildable:factory", "-q")
    assert result.ret == 2
    assert result.parseoutcomes() == {"errors": 1}, result.stdout.str()
    result.stdout.fnmatch_lines(["CONFIG ERROR unbuildable: this trainer cannot be built"])
