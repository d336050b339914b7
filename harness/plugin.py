"""pytest plugin (entry point `ppo_stats_harness`): options, fixtures, the check parametrization, reports.

The verify suite has one test, parametrized here over every check of the target's
algorithm (`harness.algorithms.cases`), each named by its check id. torch is not
imported when the plugin loads, only when a fixture or the parametrization needs it.

With `--ppo-baseline FILE` (harness/baseline.py) a test that fails with the failure lines of
a check the baseline lists is reported as an expected failure (pytest's xfail: `x` in the
progress, counted as xfailed, a `<skipped type="pytest.xfail">` in JUnit XML), and a test that
passes with a check the baseline lists fails, saying to remove the entry (as a strict xfail
that passed). `--ppo-write-baseline FILE` writes the run's failed checks as a baseline file.
"""

from __future__ import annotations

import pytest

from .plugin_baseline import WROTE, apply_baseline, not_applicable_entries, write_baseline

CONFIG_ERROR = pytest.StashKey[list]()
UNCONFIGURED = pytest.StashKey[list]()
COLLECTOR = pytest.StashKey[object]()
TARGET = pytest.StashKey[object]()
BASELINE = pytest.StashKey[object]()
RECORDED_BEFORE = pytest.StashKey[int]()
SESSION_ALGORITHM = pytest.StashKey[object]()
CASE_FIXTURE = "ppo_case"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ppo", "PPO statistics gate")
    group.addoption(
        "--ppo-target", default="reference", help="reference, trl, reference-grpo, trl-grpo, or package.module:factory"
    )
    group.addoption("--ppo-seed", type=int, default=0, help="seed of every scenario run (default 0)")
    group.addoption("--ppo-device", default="cpu", help="cpu or cuda")
    group.addoption("--ppo-dtype", default="float32", help="float32 (default), float64, bfloat16 or float16")
    group.addoption("--ppo-report-dir", default=None, help="write verify.json and verify.md here")
    group.addoption("--ppo-check", action="append", default=[], help="run only this check id (repeatable)")
    group.addoption("--ppo-set", action="append", default=[], help="a trainer setting KEY=VALUE (repeatable)")
    group.addoption(
        "--ppo-verbose", action="store_true", help="the verdict lists every metric (default: one line per check)"
    )
    group.addoption(
        "--ppo-baseline",
        default=None,
        metavar="FILE",
        help="known failures (TOML [[known]] check/reason/link): a failed check listed there is an expected "
        "failure; a new failure, or a listed check that passes, fails",
    )
    group.addoption(
        "--ppo-write-baseline", default=None, metavar="FILE", help="write the run's failed checks as a baseline file"
    )


def pytest_configure(config: pytest.Config) -> None:
    from .algorithms import SESSION_ALGORITHMS

    config.stash[CONFIG_ERROR] = []
    config.stash[UNCONFIGURED] = []
    # `case(id)` of an id several algorithms have is this session's target's algorithm's (resolved when asked)
    config.stash[SESSION_ALGORITHM] = lambda: _target(config).algorithm
    SESSION_ALGORITHMS.append(config.stash[SESSION_ALGORITHM])
    config.stash[BASELINE] = None
    path = getattr(config.option, "ppo_baseline", None)
    if path:
        from .baseline import load
        from .errors import HarnessConfigError

        try:
            config.stash[BASELINE] = load(path, _target(config).algorithm, config.option.ppo_target)
        except HarnessConfigError as exc:
            raise pytest.UsageError(str(exc)) from None
        declared = not_applicable_entries(config.stash[BASELINE], _target(config))
        if declared:
            raise pytest.UsageError(
                f"baseline {path}: check {declared[0]!r} is one target {config.option.ppo_target!r} declares not "
                "applicable, so it never runs: remove its entry"
            )


def pytest_unconfigure(config: pytest.Config) -> None:
    from .algorithms import SESSION_ALGORITHMS

    hint = config.stash.get(SESSION_ALGORITHM, None)
    if hint in SESSION_ALGORITHMS:
        SESSION_ALGORITHMS.remove(hint)


def pytest_report_header(config: pytest.Config) -> list[str]:
    opt = config.option
    settings = "".join(f" {s}" for s in opt.ppo_set)
    return [
        f"ppo-stats-harness: target={opt.ppo_target} seed={opt.ppo_seed} device={opt.ppo_device} dtype={opt.ppo_dtype}"
        + settings
    ]


def _target(config: pytest.Config):
    """The resolved target of --ppo-target (resolved once per session)."""
    from .targets import resolve

    if TARGET not in config.stash:
        config.stash[TARGET] = resolve(config.option.ppo_target)
    return config.stash[TARGET]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize the check test over the target's algorithm's cases, selected by --ppo-check."""
    if CASE_FIXTURE not in metafunc.fixturenames:
        return
    from .algorithms import cases

    every = cases(_target(metafunc.config).algorithm)
    wanted = metafunc.config.option.ppo_check
    unknown = sorted(set(wanted) - {str(c.id) for c in every})
    if unknown:
        raise pytest.UsageError(
            f"unknown check id(s) {', '.join(unknown)}; known: {', '.join(str(c.id) for c in every)}"
        )
    chosen = [c for c in every if not wanted or str(c.id) in wanted]
    metafunc.parametrize(CASE_FIXTURE, chosen, ids=[str(c.id) for c in chosen])


@pytest.fixture(scope="session")
def ppo_target(pytestconfig: pytest.Config):
    """The factory of the target named by --ppo-target."""
    return _target(pytestconfig).factory


@pytest.fixture(scope="session")
def ppo_run_spec(pytestconfig: pytest.Config):
    """Run-wide settings (seed, device, dtype) that every scenario spec of the target's algorithm takes."""
    from .algorithms import get

    opt = pytestconfig.option
    if opt.ppo_device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            pytest.skip("no CUDA device: the GPU scenarios did not run")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    algorithm = get(_target(pytestconfig).algorithm)
    settings = algorithm.parse_settings(opt.ppo_set)
    return algorithm.run_spec(opt.ppo_seed, opt.ppo_device, opt.ppo_dtype, settings)


@pytest.fixture(scope="session")
def ppo_not_applicable(pytestconfig: pytest.Config):
    """`reason(case)`: the reason the target declares it cannot run `case`, None when it declares none."""
    target = _target(pytestconfig)
    return lambda case: target.not_applicable_reason(case.id)


@pytest.fixture(scope="session")
def ppo_algorithm(pytestconfig: pytest.Config):
    """The `harness.algorithms.Algorithm` of the target named by --ppo-target."""
    from .algorithms import get

    return get(_target(pytestconfig).algorithm)


@pytest.fixture(scope="session")
def ppo_contract_lines(pytestconfig: pytest.Config, ppo_algorithm):
    """`annotate(result)`: a failed check's result with the lines of the contract's changes that touch it since the
    version the target pins (every change when it pins none; harness/contract.py)."""
    from .contract import with_changes

    pinned = _target(pytestconfig).contract_version
    return lambda result: with_changes(result, ppo_algorithm.name, ppo_algorithm.contract, pinned)


@pytest.fixture(scope="session")
def ppo_cache(pytestconfig: pytest.Config, ppo_target):
    """Each (target, scenario spec) runs once per session, however many checks read it; the checks read the target's
    declarations from it."""
    from .instrument.observe import ObservationCache

    return ObservationCache(ppo_target, _target(pytestconfig))


@pytest.fixture(scope="session")
def ppo_report(pytestconfig: pytest.Config):
    """Collects check results for verify.json / verify.md and the terminal summary."""
    from .report import Report

    opt = pytestconfig.option
    algorithm = _target(pytestconfig).algorithm
    report = Report(target=opt.ppo_target, device=opt.ppo_device, seed=opt.ppo_seed, dtype=opt.ppo_dtype,
                    algorithm=algorithm, baseline=pytestconfig.stash.get(BASELINE, None))  # fmt: skip
    pytestconfig.stash[COLLECTOR] = report
    return report


@pytest.fixture
def ppo_spy():
    """`with ppo_spy(module) as spy:` records masked_mean / selective_log_softmax; always undone."""
    from .instrument.spy import Spy

    made = []

    def make(module, **kwargs):
        spy = Spy(module, **kwargs)
        made.append(spy)
        return spy

    yield make
    for spy in made:
        spy._restore()


def is_check(item: pytest.Item) -> bool:
    """True for a test of the gate's own parametrization (one check id); a user's test that raises a configuration
    error is that test's failure, and never stops their session."""
    return CASE_FIXTURE in getattr(item, "fixturenames", ())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    from .errors import HarnessConfigError

    collector = item.config.stash.get(COLLECTOR, None)
    if call.excinfo is not None and isinstance(call.excinfo.value, HarnessConfigError) and is_check(item):
        said = str(call.excinfo.value) + changed_under(item)
        report = outcome.get_result()
        report.longrepr = f"configuration error: {said}"
        case = item.callspec.params[CASE_FIXTURE]
        errors = item.config.stash[CONFIG_ERROR]
        if said not in errors:
            errors.append(said)
        if call.when == "call" and collector is not None:
            # this check's run could not be configured (the trainer refused a setting): it errs, the others run
            item.config.stash[UNCONFIGURED].append((str(case.id), said))
            collector.add(not_configured(case.id, said))
        else:  # a fixture every check shares could not be configured: the gate's session stops
            item.session.shouldstop = f"configuration error: {said}"
    if call.when == "setup":
        item.stash[RECORDED_BEFORE] = len(collector.checks) if collector is not None else 0
    elif call.when == "call" and collector is not None and collector.baseline is not None:
        recorded = collector.checks[item.stash.get(RECORDED_BEFORE, 0) :]
        apply_baseline(outcome.get_result(), call, recorded, collector)


def not_configured(check_id, said: str):
    """The result of a check whose run could not be configured: an error saying why."""
    from .verdict import CheckResult, CheckStatus

    return CheckResult(check_id, CheckStatus.ERROR, problems=(f"configuration error: {said}",))


def unconfigured_line(check_ids: list[str]) -> str:
    """The one line that ends a run some of whose checks could not be configured: which, and how a target that
    cannot run a check declares it."""
    count = f"{len(check_ids)} check{'s' if len(check_ids) != 1 else ''}"
    return (
        f"{count} could not be configured: {', '.join(check_ids)}; a target that cannot run a check declares it "
        'not applicable, with its reason: factory.not_applicable = {"<check id, pattern or KEY=VALUE>": "<reason>"} '
        "(docs/using-the-gate.md)"
    )


def changed_under(item: pytest.Item) -> str:
    """For a check whose run could not be configured: ' (in CHECK; <each contract change that touches it since the
    version the target pins>)', so that a target written before the change hears which one; '' for none."""
    from .algorithms import get

    case = getattr(item, "callspec", None) and item.callspec.params.get(CASE_FIXTURE)
    if case is None:
        return ""
    target = _target(item.config)
    lines = get(target.algorithm).contract.lines(target.algorithm, str(case.id), target.contract_version)
    return f" (in {case.id}; {'; '.join(lines)})" if lines else ""


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    from .report import write_report
    from .verdict import CheckStatus

    errors = session.config.stash.get(CONFIG_ERROR, [])
    report = session.config.stash.get(COLLECTOR, None)
    report_dir = session.config.option.ppo_report_dir
    if report is not None and report.checks and not errors and session.exitstatus == 0 and not any(
        c.status in (CheckStatus.PASS, CheckStatus.FAIL) for c in report.checks
    ):  # every check not applicable or skipped: exit 0 would pass a gate that verified nothing
        errors.append(f"nothing was verified: none of the {len(report.checks)} selected checks ran (each is not "
                      "applicable to this target or was skipped)")  # fmt: skip
    if session.config.option.ppo_write_baseline:
        write_baseline(session.config, report, errors)
    if report is not None and report_dir:
        # a check that could not be configured is already the report's, as an error; the others become error rows
        in_checks = {said for _, said in session.config.stash.get(UNCONFIGURED, [])}
        report.config_errors.extend(e for e in errors if e not in in_checks)
        write_report(report, report_dir)  # also appends the Markdown to $GITHUB_STEP_SUMMARY when set
    if errors:
        session.exitstatus = 2


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """The verdict: one line per check (every metric with --ppo-verbose or pytest -v), then configuration errors.

    With pytest's tracebacks off (`--tb=no`, as `ppo-verify` runs without -v), a failed test or a
    collection error that is not a check would show nowhere: each gets a line with its last line.
    """
    from .report.terminal import render_terminal

    report = config.stash.get(COLLECTOR, None)
    errors = config.stash.get(CONFIG_ERROR, [])
    verbose = config.option.ppo_verbose or config.get_verbosity() > 0
    checks = report.checks if report is not None else []
    if checks:
        terminalreporter.section("ppo-stats-harness verdict")
        for line in render_terminal(report, verbose=verbose).splitlines():
            terminalreporter.write_line(line)
    if config.option.tbstyle == "no":
        recorded = {f"test_check[{check.id}]" for check in checks}
        for kind, key in (("FAIL", "failed"), ("ERROR", "error")):
            for rep in terminalreporter.stats.get(key, []):
                if rep.nodeid.rpartition("::")[2] in recorded:
                    continue
                last = (rep.longreprtext.strip().splitlines() or [""])[-1].removeprefix("E").strip()
                is_test = getattr(rep, "when", None) is not None  # a collection error has no phase
                terminalreporter.write_line(f"{kind if is_test else 'ERROR'}  {rep.nodeid}  {last}", red=True)
    unconfigured = [check_id for check_id, _ in config.stash.get(UNCONFIGURED, [])]
    for line in errors + ([unconfigured_line(unconfigured)] if unconfigured else []):
        terminalreporter.write_line(f"CONFIG ERROR {line}", red=True)
    if WROTE in config.stash:
        terminalreporter.write_line(config.stash[WROTE])
