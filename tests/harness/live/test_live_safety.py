"""Live mode never harms the run it checks, and can be seen (docs/live.md, "Never in the way", "Seeing it").

- Every option is validated when the check is created, with one error naming it (`LiveConfigError`, a ValueError).
- A fault of the check itself (a report folder that cannot be written, or that became a file, an exception in the
  check, in the diagnosis, in the gather of the ranks' records) is one WARNING line naming the log: the run goes on
  and logs the same losses as without the check.
- The lines are visible in a script that configures no logging, and printed once when it does.
- The verdict reaches the trainer's loggers: TensorBoard's event files hold `live/<name>_expected`, `_gap`, `_pass`
  and `live/pass` at the checked steps.
"""

from __future__ import annotations

import logging
import os
import sys

import pytest

from harness.algorithms.grpo.spec import GRPOSpec
from harness.live import LiveConfigError, LiveSession, expected_key, live_reference
from harness.live.interval import PASS_KEY, gap_key, pass_key
from tests.harness.live import runs
from tests.harness.live.runs import train_trl, trained

PASSING = GRPOSpec(max_steps=3, gradient_accumulation_steps=1, logging_steps=1, beta=0.04)
"""One micro-batch per logged interval: TRL's flat mean of micro-batch means is the token mean, so its every
interval passes and the only WARNING line a test sees is the fault's."""


def trl_run(spec=PASSING, extra=None):
    return runs.trl_run(spec, extra)


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "harness.live" and r.levelno >= logging.WARNING]


# ---------------------------------------------------------------- options, validated when created


@pytest.mark.parametrize(
    ("options", "names"),
    [
        ({"every": 0}, "every=0"),
        ({"every": 2.5}, "every=2.5"),
        ({"every": True}, "every=True"),
        ({"first": 0}, "first=0"),
        ({"first": "1"}, "first='1'"),
        ({"max_intervals": 0}, "max_intervals=0"),
        ({"raise_on_failure": 1}, "raise_on_failure=1"),
        ({"log_expected": "yes"}, "log_expected='yes'"),
        ({"report_dir": 3}, "report_dir=3"),
    ],
)
def test_each_bad_option_is_one_error_naming_it(options, names):
    with pytest.raises(LiveConfigError, match=f"^live check: {names.replace('.', '[.]')} "):
        LiveSession(**options)


def test_report_dir_is_created_and_written_when_the_check_is_created(tmp_path):
    where = tmp_path / "a" / "b"
    session = LiveSession(report_dir=where)
    assert session.report_dir == where and where.is_dir() and list(where.iterdir()) == []  # the test write is gone
    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(LiveConfigError, match="report_dir=.*is a file, not a folder"):
        LiveSession(report_dir=a_file)
    with pytest.raises(LiveConfigError, match="report_dir=.*cannot be written to"):
        LiveSession(report_dir=a_file / "below")  # its parent is a file


def test_an_unwritable_report_dir_is_refused_when_the_check_is_created(tmp_path, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    if os.access(locked, os.W_OK):  # root writes anyway: refuse the test file as the file system would
        import tempfile

        def refused(*args, **kwargs):
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(tempfile, "NamedTemporaryFile", refused)
    try:
        with pytest.raises(LiveConfigError, match="report_dir=.*cannot be written to: Permission denied"):
            LiveSession(report_dir=locked)
    finally:
        locked.chmod(0o755)


@pytest.mark.trl
def test_live_check_refuses_bad_options_of_its_own():
    pytest.importorskip("trl")
    from harness.live import LiveCheck

    with pytest.raises(LiveConfigError, match="logit_gaps='no'"):
        LiveCheck(logit_gaps="no")
    with pytest.raises(LiveConfigError, match="trainer=object is not a transformers Trainer"):
        LiveCheck(trainer=object())
    with pytest.raises(LiveConfigError, match="every=-1"):
        LiveCheck(every=-1)


# ---------------------------------------------------------------- faults of the check: one WARNING, the run goes on


@pytest.fixture(scope="module")
def bare_logs():
    """The passing spec's run without the check: what every faulty run must log."""
    return trained(train_trl(trl_run()))


def checked_run(caplog, before=None, **options) -> tuple:
    """The passing spec's TRL run with `LiveCheck(**options)`, trained: (run, the check, its logs). `before()` is
    called after the check is created, before training."""
    from harness.live import LiveCheck

    run = trl_run()
    live = LiveCheck(**options)
    run.trainer.add_callback(live)
    if before is not None:
        before()
    with caplog.at_level(logging.INFO, logger="harness.live"):
        logs = train_trl(run)
    return run, live, logs


def _once(fault: BaseException):
    """A replacement that raises `fault` at its first call, and calls through afterwards."""
    calls = []

    def wrap(original):
        def faulty(*args, **kwargs):
            calls.append(1)
            if len(calls) == 1:
                raise fault
            return original(*args, **kwargs)

        return faulty

    return wrap


FAULTS = ("check", "diagnosis", "gather", "unwritable_report_dir", "report_dir_became_a_file")


def _inject(fault: str, monkeypatch, report_dir) -> str:
    """Put `fault` in the live check's way; the words its WARNING line must hold."""
    import pathlib

    import harness.algorithms.grpo.live as grpo_live
    import harness.live.session as session

    if fault == "check":
        broken = _once(RuntimeError("the oracle broke"))(grpo_live.check_interval)
        monkeypatch.setattr(grpo_live, "check_interval", broken)
        return "live check log 1 (step 1): not checked (the check: RuntimeError: the oracle broke); the run goes on"
    if fault == "diagnosis":
        broken = _once(ValueError("no pooling fits"))(grpo_live.diagnose_interval)
        monkeypatch.setattr(grpo_live, "diagnose_interval", broken)
        return "live check log 1 (step 1): not checked (the check: ValueError: no pooling fits); the run goes on"
    if fault == "gather":
        broken = _once(RuntimeError("all_gather_object timed out"))(session.gather_records)
        monkeypatch.setattr(session, "gather_records", broken)
        return "live check log 1 (step 1): not checked (the check: RuntimeError: all_gather_object timed out)"
    if fault == "unwritable_report_dir":  # writable when the check was created, refused during the run
        write_text = pathlib.Path.write_text

        def refused(self, *args, **kwargs):
            if pathlib.Path(self).parent == report_dir:
                raise PermissionError(13, "Permission denied", str(self))
            return write_text(self, *args, **kwargs)

        monkeypatch.setattr(pathlib.Path, "write_text", refused)
        return "live check log 1 (step 1): report not written to"
    if fault == "report_dir_became_a_file":
        report_dir.rmdir()
        report_dir.write_text("not a folder")
        return "live check log 1 (step 1): report not written to"
    raise AssertionError(fault)


@pytest.mark.trl
@pytest.mark.parametrize("fault", FAULTS)
def test_a_fault_of_the_check_is_one_warning_and_the_run_goes_on(fault, bare_logs, tmp_path, monkeypatch, caplog):
    report_dir, said = tmp_path / "reports", []

    def inject():  # after the check validated report_dir
        said.append(_inject(fault, monkeypatch, report_dir))

    run, live, logs = checked_run(caplog, inject, every=1, report_dir=report_dir)
    assert trained(logs) == bare_logs  # the run finished, with the same logged losses and metrics
    (warning,) = warnings_of(caplog)
    assert warning.startswith(said[0]), warning
    if fault.startswith(("unwritable", "report_dir")):
        assert live.summary.checked == PASSING.total_logs and live.summary.unchecked_logs == []
        assert not report_dir.is_dir() or not list(report_dir.glob("log-*.json"))  # no more report files
    else:  # the faulty interval is not checked; the next ones are
        assert live.summary.unchecked_logs == [1] and live.summary.checked == PASSING.total_logs - 1
        assert not any(k.startswith("live/") for k in logs[0]) and logs[1][PASS_KEY] == 1.0
        assert "not checked: logs 1 (errors of the check, above)" in live.summary.line()
    assert live.summary.failed == 0
    assert "_compute_loss" not in vars(run.trainer) and "on_log" not in vars(run.trainer.callback_handler)


@pytest.mark.trl
def test_a_recorder_that_cannot_be_installed_leaves_the_interval_unchecked(bare_logs, monkeypatch, caplog):
    import harness.algorithms.grpo.targets.live.trl as adapter

    monkeypatch.setattr(adapter, "live_recorder", _once(RuntimeError("no such method"))(adapter.live_recorder))
    run, live, logs = checked_run(caplog, every=1)
    assert trained(logs) == bare_logs
    (warning,) = warnings_of(caplog)
    assert "log 1 (step 1): not checked" in warning and "the recorder could not be installed" in warning
    assert live.summary.unchecked_logs == [1] and live.summary.checked == PASSING.total_logs - 1


@pytest.mark.trl
def test_a_trainer_the_check_cannot_hold_trains_unchecked(bare_logs, monkeypatch, caplog):
    import harness.algorithms.grpo.targets.live.trl as adapter
    from harness.errors import HarnessConfigError

    def not_grpo(trainer):
        raise HarnessConfigError("LiveCheck: MyTrainer is not a GRPOTrainer")

    monkeypatch.setattr(adapter, "trainer_module", not_grpo)
    run, live, logs = checked_run(caplog, every=1)
    assert trained(logs) == bare_logs
    assert warnings_of(caplog) == ["live check off for this run: HarnessConfigError: LiveCheck: MyTrainer is not a "
                                   "GRPOTrainer"]  # fmt: skip
    assert live.summary.checked == 0


def test_reference_fault_of_the_check_is_one_warning(monkeypatch, caplog):
    import harness.algorithms.grpo.live as grpo_live
    from harness.algorithms.grpo.targets.reference import factory

    spec = GRPOSpec(max_steps=3, gradient_accumulation_steps=2, logging_steps=1, beta=0.04)
    bare = factory(spec).trainer.train()
    monkeypatch.setattr(grpo_live, "check_interval", _once(RuntimeError("the oracle broke"))(grpo_live.check_interval))
    run = factory(spec)
    with caplog.at_level(logging.INFO, logger="harness.live"), live_reference(run.trainer, every=1) as live:
        history = run.trainer.train()
    assert [{k: v for k, v in m.items() if not k.startswith("live/")} for m in history] == bare
    assert warnings_of(caplog) == ["live check log 1 (step 1): not checked (the check: RuntimeError: the oracle "
                                   "broke); the run goes on"]  # fmt: skip
    assert live.summary.unchecked_logs == [1] and live.summary.checked == 2 and live.summary.failed == 0


def _failing_copy(monkeypatch):
    """The loss recorder's copy of the log-probs fails once, inside the trainer's loss call (a recorder fault)."""
    import harness.instrument.loss_recorder as recorder

    monkeypatch.setattr(recorder._Draft, "keep_logps",
                        _once(MemoryError("no room for the copy"))(recorder._Draft.keep_logps))  # fmt: skip


@pytest.mark.trl
def test_a_fault_of_the_recorder_inside_the_loss_is_one_warning(bare_logs, monkeypatch, caplog):
    """A failure of the recorder's own code inside TRL's loss call never reaches TRL's loop: the log goes
    unchecked, with the fault named, and the run logs what it logs without the check."""
    run, live, logs = checked_run(caplog, lambda: _failing_copy(monkeypatch), every=1)
    assert trained(logs) == bare_logs
    (warning,) = warnings_of(caplog)
    assert "log 1 (step 1): not checked" in warning and "MemoryError: no room for the copy" in warning, warning
    assert live.summary.unchecked_logs == [1] and live.summary.checked == PASSING.total_logs - 1


def test_reference_fault_of_the_recorder_is_one_warning(monkeypatch, caplog):
    from harness.algorithms.grpo.targets.reference import factory

    spec = GRPOSpec(max_steps=3, gradient_accumulation_steps=2, logging_steps=1, beta=0.04)
    bare = factory(spec).trainer.train()
    _failing_copy(monkeypatch)
    run = factory(spec)
    with caplog.at_level(logging.INFO, logger="harness.live"), live_reference(run.trainer, every=1) as live:
        history = run.trainer.train()
    assert [{k: v for k, v in m.items() if not k.startswith("live/")} for m in history] == bare
    (warning,) = warnings_of(caplog)
    assert "log 1 (step 1): not checked" in warning and "MemoryError: no room for the copy" in warning, warning
    assert live.summary.unchecked_logs == [1] and live.summary.checked == 2


def test_reference_raise_option_ends_the_run_through_its_own_bound(caplog):
    """The reference loop runs while `step < config.max_steps`: a failing interval lowers the bound to the steps
    done, train() returns after the failing log (every callback called, the trackers' log made), and the bound is
    put back when the context closes."""
    from harness.algorithms.grpo.targets.reference import factory
    from harness.live import LiveCheckFailed

    spec = GRPOSpec(max_steps=4, gradient_accumulation_steps=2, logging_steps=1, beta=0.04)
    run = factory(spec)
    seen = []
    with caplog.at_level(logging.INFO, logger="harness.live"):
        with live_reference(run.trainer, every=1, raise_on_failure=True) as live:

            def wrong_entropy(metrics, step):  # a trainer whose logged entropy is off by 1
                metrics["entropy"] += 1.0

            run.trainer.callbacks.insert(0, wrong_entropy)
            run.trainer.callbacks.append(lambda metrics, step: seen.append(step))
            history = run.trainer.train()
        assert run.trainer.config.max_steps == 4  # put back
    assert len(history) == 1 and seen == [1] and run.trainer.step == 1
    assert live.failed and live.summary.stopped_at_log == 1
    assert history[0][PASS_KEY] == 0.0 and history[0][pass_key("entropy")] == 0.0
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == [
        "live check log 1 (step 1) failed: ending the run after this step (raise_on_failure=True)"
    ]
    with pytest.raises(LiveCheckFailed, match="entropy"):
        live.raise_if_failed()


# ---------------------------------------------------------------- seen without configuring logging


def unconfigured(monkeypatch):
    """The process as a script that configures no logging sees it: no handler on the root logger (pytest's own,
    added for the test's call, taken off), `harness.live` at its default level. Called in the test's body."""
    from harness.live import session

    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(session.logger, "handlers", [])
    monkeypatch.setattr(session.logger, "level", logging.NOTSET)
    return session


def test_lines_are_seen_without_configuring_logging(monkeypatch, capsys):
    unconfigured(monkeypatch)
    LiveSession(every=20, report_dir=None).arm(None, "a trainer")
    logging.getLogger("harness.live").info("live check log 1 (step 1): pass")
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "live check armed on a trainer: one logging interval in 20 (logs 1, 21, 41, ...), judged at the "
        "run's precision; no report files (report_dir=None)",
        "live check log 1 (step 1): pass",
    ]


def test_lines_are_printed_once_when_the_script_configures_logging(monkeypatch, capsys):
    unconfigured(monkeypatch)
    LiveSession(every=20)
    LiveSession(every=5)  # a second check adds no second handler
    handler = logging.StreamHandler(sys.stderr)
    logging.getLogger().addHandler(handler)  # the script's own logging, configured after the check was created
    logging.getLogger("harness.live").warning("live check log 1 (step 1): FAIL")
    assert capsys.readouterr().err.splitlines() == ["live check log 1 (step 1): FAIL"]


# ---------------------------------------------------------------- the verdict on the trainer's dashboard


@pytest.mark.trl
def test_tensorboard_event_files_hold_the_verdict(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard", reason="tensorboard is not installed (the `test` extra should have it)")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from harness.live import LiveCheck

    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "tb"))
    spec = GRPOSpec(max_steps=3, gradient_accumulation_steps=2, logging_steps=1, beta=0.04)  # TRL fails entropy
    run = trl_run(spec, extra={"report_to": ["tensorboard"]})
    live = LiveCheck(every=2)
    run.trainer.add_callback(live)
    train_trl(run)
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    scalars = set(events.Tags()["scalars"])

    def series(key):  # transformers' TensorBoard callback files a training log's `key` as `train/key`
        return {e.step: e.value for e in events.Scalars(f"train/{key}")}

    verdicts = {v.name: v for v in live.results[0].verdicts}
    for name in ("entropy", "kl", "clip_ratio/low_mean"):
        for key in (expected_key(name), gap_key(name), pass_key(name)):
            assert f"train/{key}" in scalars, (key, sorted(scalars))
            assert set(series(key)) == {1, 3}  # the checked logs' steps only
        assert series(expected_key(name))[1] == pytest.approx(verdicts[name].expected, rel=1e-6)
        assert series(gap_key(name))[1] == pytest.approx(verdicts[name].abs_err, rel=1e-5, abs=1e-9)
    assert series(pass_key("entropy")) == {1: 0.0, 3: 0.0} and series(pass_key("clip_ratio/low_mean"))[1] == 1.0
    assert series(PASS_KEY) == {1: 0.0, 3: 0.0}
    assert set(series("entropy")) == {1, 2, 3}  # beside the trainer's own
