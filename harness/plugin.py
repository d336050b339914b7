"""pytest plugin (entry point `ppo_stats_harness`): the gate's engine (harness/engine.py) seen from pytest.

For a trainer held to the gate from its own test suite: the `--ppo-*` options, the fixtures (`ppo_cache`,
`ppo_run_spec`, `ppo_report`, `ppo_spy`, ...), the parametrization of the verify suite's one test
(harness/suite/test_verify.py) over the checks of the target's algorithm, each named by its check id, and the
reports (`--ppo-report-dir`; JUnit XML is pytest's own `--junitxml`). The run loop, its configuration errors and
the baseline are the engine's: the session's `Gate` (one per session, made when a fixture or the parametrization
first needs it) runs each check into its `Report`. torch is not imported when the plugin loads.

With `--ppo-baseline FILE` (harness/baseline.py) a test is an expected failure (pytest's xfail: `x` in the
progress, counted as xfailed, a `<skipped type="pytest.xfail">` in JUnit XML) when the report says every check it
recorded that did not pass is a known failure (`Report.known`) and it failed an assertion (`assert`, `pytest.fail`);
a test that recorded a new failure or raised anything else stays failed. A test that passes with a check the
baseline lists as known fails, saying that it passes (a fix, or a change in how the trainer runs the scenario: as a
strict xfail that passed). `--ppo-write-baseline
FILE` writes the run's failed checks as a baseline file.
"""

from __future__ import annotations

import pytest

from .plugin_baseline import WROTE, apply_baseline, write_baseline

CONFIG_ERROR = pytest.StashKey[list]()
GATE = pytest.StashKey[object]()
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
        help="known failures (TOML [[known]] check/reason/link, [known.metrics] each failing metric's diagnoses): "
        "a listed check that fails as pinned is an expected failure; a new failure, a listed check that fails "
        "otherwise, or one that passes, fails",
    )
    group.addoption(
        "--ppo-write-baseline", default=None, metavar="FILE", help="write the run's failed checks as a baseline file"
    )


def pytest_configure(config: pytest.Config) -> None:
    from .algorithms import SESSION_ALGORITHMS

    config.stash[CONFIG_ERROR] = []
    # `case(id)` of an id several algorithms have is this session's target's algorithm's (resolved when asked)
    config.stash[SESSION_ALGORITHM] = lambda: _target(config).algorithm
    SESSION_ALGORITHMS.append(config.stash[SESSION_ALGORITHM])
    if getattr(config.option, "ppo_baseline", None):  # a bad baseline file stops the session before it collects
        from .errors import HarnessConfigError

        try:
            _gate(config)
        except HarnessConfigError as exc:
            raise pytest.UsageError(str(exc)) from None


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
    """The resolved target of --ppo-target (the session's gate's, once there is one)."""
    from .targets import resolve

    gate = config.stash.get(GATE, None)
    return gate.target if gate is not None else resolve(config.option.ppo_target)


def _gate(config: pytest.Config):
    """The session's `harness.engine.Gate` of the --ppo-* options (made once; HarnessConfigError when they do not
    configure a run, a CUDA device the machine lacks included: a gate that ran nothing must not pass)."""
    from .engine import Gate, GateOptions

    if GATE not in config.stash:
        opt = config.option
        options = GateOptions(target=opt.ppo_target, seed=opt.ppo_seed, device=opt.ppo_device, dtype=opt.ppo_dtype,
                              checks=tuple(opt.ppo_check), settings=tuple(opt.ppo_set),
                              baseline=opt.ppo_baseline)  # fmt: skip
        config.stash[GATE] = Gate(options)
    return config.stash[GATE]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize the check test over the target's algorithm's cases, selected by --ppo-check."""
    if CASE_FIXTURE not in metafunc.fixturenames:
        return
    from .errors import HarnessConfigError

    try:
        chosen = _gate(metafunc.config).cases()
    except HarnessConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    metafunc.parametrize(CASE_FIXTURE, chosen, ids=[str(c.id) for c in chosen])


@pytest.fixture(scope="session")
def ppo_gate(pytestconfig: pytest.Config):
    """The session's `harness.engine.Gate`: `ppo_gate.run(case)` runs one check into the session's report. Built once
    (the target's run made for the run-wide spec, which imports its trainer's library), then what the session
    imported and built stays off the collector until the session ends, as `python -m harness verify` keeps it
    (harness/heap.py): a library target's runs make full collections (accelerate's `free_memory`)."""
    from .heap import frozen

    gate = _gate(pytestconfig)
    gate.build()
    with frozen():
        yield gate


@pytest.fixture(scope="session")
def ppo_target(pytestconfig: pytest.Config):
    """The factory of the target named by --ppo-target."""
    return _target(pytestconfig).factory


@pytest.fixture(scope="session")
def ppo_run_spec(ppo_gate):
    """Run-wide settings (seed, device, dtype) that every scenario spec of the target's algorithm takes."""
    return ppo_gate.run_spec


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
def ppo_contract_lines(ppo_gate):
    """`annotate(result)`: a failed check's result with the lines of the contract's changes that touch it since the
    version the target pins (every change when it pins none; harness/contract.py)."""
    return ppo_gate.annotated


@pytest.fixture(scope="session")
def ppo_cache(ppo_gate):
    """Each (target, scenario spec) runs once per session, however many checks read it; the checks read the target's
    declarations from it."""
    return ppo_gate.cache


@pytest.fixture(scope="session")
def ppo_report(ppo_gate):
    """Collects check results for verify.json / verify.md and the terminal summary."""
    return ppo_gate.report


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


def _report(config: pytest.Config):
    """The session's report, or None when no test asked for the gate."""
    gate = config.stash.get(GATE, None)
    return gate.report if gate is not None else None


def configuration_errors(config: pytest.Config) -> list[str]:
    """Every configuration error of the session, one line each: the gate's own (its options, target or device), the
    run's, and each check whose run could not be configured (its error's line); [] for none."""
    from .report.unconfigured import configuration_problem

    report = _report(config)
    errors = list(config.stash.get(CONFIG_ERROR, []))
    if report is not None:
        errors += report.config_errors
        errors += [configuration_problem(said) for said in report.unconfigured.values()]
    return errors


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    from .errors import HarnessConfigError

    if call.excinfo is not None and isinstance(call.excinfo.value, HarnessConfigError) and call.when == "setup":
        # a fixture of the gate (its options, target or device) could not be configured: the session stops, exit 2;
        # a configuration error a test of one's own raises while it runs stays that test's failure
        said = str(call.excinfo.value)
        outcome.get_result().longrepr = f"configuration error: {said}"
        if said not in item.config.stash[CONFIG_ERROR]:
            item.config.stash[CONFIG_ERROR].append(said)
        item.session.shouldstop = f"configuration error: {said}"
    from .report.format import CheckFailed

    if call.excinfo is not None and isinstance(call.excinfo.value, CheckFailed):
        outcome.get_result().longrepr = str(call.excinfo.value)  # the check's failure lines are the whole story
    report = _report(item.config)
    if call.when == "setup":
        item.stash[RECORDED_BEFORE] = len(report.checks) if report is not None else 0
    elif call.when == "call" and report is not None and report.baseline is not None:
        recorded = report.checks[item.stash.get(RECORDED_BEFORE, 0) :]
        apply_baseline(outcome.get_result(), call, recorded, report)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    from .report import write_report

    errors = session.config.stash.get(CONFIG_ERROR, [])
    gate = session.config.stash.get(GATE, None)
    report = gate.finish() if gate is not None and gate.report.checks else None
    if session.config.option.ppo_write_baseline:
        write_baseline(session.config, report, errors)
    if report is not None and session.config.option.ppo_report_dir:
        report.config_errors.extend(e for e in errors if e not in report.config_errors)
        write_report(report, session.config.option.ppo_report_dir)  # also appends to $GITHUB_STEP_SUMMARY when set
    if errors or (report is not None and (report.config_errors or report.unconfigured)):
        session.exitstatus = 2


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """The verdict: one line per check (every metric with --ppo-verbose or pytest -v), then configuration errors.

    With pytest's tracebacks off (`--tb=no`), a failed test or a collection error that is not a check would show
    nowhere: each gets a line with its last line.
    """
    from .engine import error_lines
    from .report.terminal import render_terminal

    report = _report(config)
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
    errors = config.stash.get(CONFIG_ERROR, [])
    said = errors + [line for line in (error_lines(report) if report is not None else []) if line not in errors]
    for line in said:
        terminalreporter.write_line(f"CONFIG ERROR {line}", red=True)
    if WROTE in config.stash:
        terminalreporter.write_line(config.stash[WROTE])
