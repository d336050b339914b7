"""pytest plugin (entry point `ppo_stats_harness`): options, fixtures, report header and reports.

torch is not imported when the plugin loads, only when a fixture needs it.
"""

from __future__ import annotations

import pytest

CONFIG_ERROR = pytest.StashKey[list]()
COLLECTOR = pytest.StashKey[object]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ppo", "PPO statistics gate")
    group.addoption("--ppo-target", default="reference", help="reference, trl, or package.module:factory")
    group.addoption("--ppo-seed", type=int, default=0, help="seed of every scenario run (default 0)")
    group.addoption("--ppo-device", default="cpu", help="cpu or cuda")
    group.addoption("--ppo-dtype", default="float32", help="float32 (default), float64 or bfloat16")
    group.addoption("--ppo-report-dir", default=None, help="write verify.json and verify.md here")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[CONFIG_ERROR] = []


def pytest_report_header(config: pytest.Config) -> list[str]:
    opt = config.option
    return [
        f"ppo-stats-harness: target={opt.ppo_target} seed={opt.ppo_seed} device={opt.ppo_device} dtype={opt.ppo_dtype}"
    ]


@pytest.fixture(scope="session")
def ppo_target(pytestconfig: pytest.Config):
    """The factory of the target named by --ppo-target."""
    from .targets import resolve

    return resolve(pytestconfig.option.ppo_target)


@pytest.fixture(scope="session")
def ppo_run_spec(pytestconfig: pytest.Config):
    """Run-wide settings (seed, device, dtype) that every scenario spec takes."""
    from .spec import ScenarioSpec

    opt = pytestconfig.option
    if opt.ppo_device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            pytest.skip("no CUDA device: the GPU scenarios did not run")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    return ScenarioSpec(seed=opt.ppo_seed, device=opt.ppo_device, dtype=opt.ppo_dtype)


@pytest.fixture(scope="session")
def ppo_cache(ppo_target):
    """Each (target, scenario spec) runs once per session, however many checks read it."""
    from .runner import ObservationCache

    return ObservationCache(ppo_target)


@pytest.fixture(scope="session")
def ppo_report(pytestconfig: pytest.Config):
    """Collects check results for verify.json / verify.md and the terminal summary."""
    from .report import ReportCollector

    opt = pytestconfig.option
    collector = ReportCollector(target=opt.ppo_target, device=opt.ppo_device, seed=opt.ppo_seed, dtype=opt.ppo_dtype)
    pytestconfig.stash[COLLECTOR] = collector
    return collector


@pytest.fixture
def ppo_spy():
    """`with ppo_spy(module) as spy:` records masked_mean / selective_log_softmax; always undone."""
    from .spy import Spy

    made = []

    def make(module, **kwargs):
        spy = Spy(module, **kwargs)
        made.append(spy)
        return spy

    yield make
    for spy in made:
        spy._restore()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    from .errors import HarnessConfigError

    if call.excinfo is not None and isinstance(call.excinfo.value, HarnessConfigError):
        item.config.stash[CONFIG_ERROR].append(f"{item.nodeid}: {call.excinfo.value}")
        report = outcome.get_result()
        report.longrepr = f"configuration error: {call.excinfo.value}"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    errors = session.config.stash.get(CONFIG_ERROR, [])
    collector = session.config.stash.get(COLLECTOR, None)
    report_dir = session.config.option.ppo_report_dir
    if collector is not None and report_dir:
        if errors:
            collector.config_errors.extend(errors)
        collector.write(report_dir)  # also appends the Markdown to $GITHUB_STEP_SUMMARY when set
    if errors:
        session.exitstatus = 2


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    collector = config.stash.get(COLLECTOR, None)
    errors = config.stash.get(CONFIG_ERROR, [])
    if collector is not None and collector.checks:
        terminalreporter.section("ppo-stats-harness verdict")
        for line in collector.terminal_lines():
            terminalreporter.write_line(line)
    for line in errors:
        terminalreporter.write_line(f"CONFIG ERROR {line}", red=True)
