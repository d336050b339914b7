"""Every command that cannot import what it needs says so in one line on stderr, naming what to install, and exits
2: never a traceback (harness/needs.py).

Each case runs the command in a subprocess whose import system cannot find the named modules: every finder of
`sys.meta_path` is wrapped so that it finds nothing of theirs, as in an environment where they are not installed
(`importlib.util.find_spec` answers None, an import raises ModuleNotFoundError naming the module).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness import needs

ROOT = Path(__file__).resolve().parents[2]

WITHOUT = textwrap.dedent(
    """
    import os, runpy, sys

    HIDDEN = set(os.environ["HIDE_MODULES"].split(","))

    class Without:
        def __init__(self, finder):
            self.finder = finder

        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in HIDDEN or not hasattr(self.finder, "find_spec"):
                return None
            return self.finder.find_spec(name, path, target)

        def __getattr__(self, attr):
            return getattr(self.finder, attr)

    sys.meta_path[:] = [Without(finder) for finder in sys.meta_path]
    what, sys.argv = sys.argv[1], sys.argv[1:]
    if what == "ppo-verify":
        from harness.cli import verify_main

        sys.exit(verify_main())
    runpy.run_module(what, run_name="__main__", alter_sys=True)
    """
)
"""`python -c WITHOUT MODULE ARGS...`: `python -m MODULE ARGS...` (or the `ppo-verify` script) without the modules
named in HIDE_MODULES."""


def run_without(hidden: str, command: list[str], tmp_path: Path, pythonpath: str = "") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(HIDE_MODULES=hidden, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1",
               TRL_EXPERIMENTAL_SILENCE="1", GITHUB_STEP_SUMMARY="",
               PYTHONPATH=os.pathsep.join(p for p in (pythonpath, str(ROOT)) if p))  # fmt: skip
    return subprocess.run([sys.executable, "-c", WITHOUT, *command], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip


def one_line(done: subprocess.CompletedProcess, starts: str, names: str) -> str:
    """The one line on stderr, after checking the exit code (2) and that it is all there is."""
    shown = f"exit {done.returncode}\nstdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    assert done.returncode == 2, shown
    assert "Traceback" not in done.stderr, shown
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, shown
    assert lines[0].startswith(starts), shown
    assert names in lines[0], shown
    return lines[0]


CASES = [
    # (hidden modules, command, the line's start, what it names)
    ("hypothesis", ["harness", "verify", "--target", "reference-grpo"], "error: python -m harness verify needs "
     "hypothesis", needs.GATE),
    ("torch", ["harness", "verify"], "error: python -m harness verify needs torch", needs.TORCH),
    ("torch", ["ppo-verify", "--target", "reference-grpo"], "error: ppo-verify needs torch", needs.TORCH),
    ("torch", ["harness", "verify-dist"], "error: python -m harness verify-dist needs torch", needs.TORCH),
    ("torch", ["harness", "checks"], "error: python -m harness checks needs torch", needs.TORCH),
    ("hypothesis", ["harness", "checks"], "error: python -m harness checks needs hypothesis", needs.GATE),
    ("torch", ["harness.live", "--target", "reference-grpo"], "error: python -m harness.live needs torch",
     needs.TORCH),
    ("trl", ["harness.live", "--target", "trl-grpo"], "error: python -m harness.live needs trl", needs.TRL),
    # the small size on the CPU ends with a gate's wall time, whose PPO partitions Hypothesis draws; the medium size
    # needs no Hypothesis (its bench imports no scenario)
    ("hypothesis", ["harness.bench", "--size", "small"], "error: python -m harness.bench needs hypothesis",
     needs.GATE),
    ("torch", ["harness.bench", "--size", "medium"], "error: python -m harness.bench needs torch", needs.TORCH),
    ("pytest", ["mutants", "mutmut"], "error: python -m mutants mutmut needs pytest", needs.GATE),
    ("torch", ["mutants", "report", "--no-install"], "error: python -m mutants report needs torch", needs.TORCH),
    ("mutmut", ["mutants", "mutmut"], "error: python -m mutants mutmut needs mutmut", needs.INSTALL["mutmut"]),
    ("mutmut", ["mutants"], "error: python -m mutants all needs mutmut", needs.INSTALL["mutmut"]),
]


@pytest.mark.parametrize(("hidden", "command", "starts", "names"), CASES, ids=lambda v: " ".join(v) if
                         isinstance(v, list) else None)  # fmt: skip
def test_a_command_without_a_module_it_needs_says_so_in_one_line_and_exits_2(hidden, command, starts, names,
                                                                             tmp_path):  # fmt: skip
    one_line(run_without(hidden, [*command, *report_dir(command, tmp_path)], tmp_path), starts, names)


def report_dir(command: list[str], tmp_path: Path) -> list[str]:
    """`--report-dir` into the test's folder, for the commands that write reports."""
    if command[:2] in (["harness", "verify"], ["harness", "verify-dist"]) or command[0] in ("ppo-verify",
                                                                                           "harness.live"):
        return ["--report-dir", str(tmp_path / "reports")]
    if command[0] == "mutants" and command[1:2] != ["triage"]:
        return ["--report-dir", str(tmp_path / "reports")]
    return []


def test_a_trainer_of_ones_own_is_checked_without_pytest(tmp_path):
    """The README's `PYTHONPATH=examples/external_grpo/src python -m harness verify --target tinygrpo.target:factory`
    (two of its checks), in an environment where pytest cannot be imported: the engine needs none, so it runs, and
    `ppo-verify` with it."""
    for command in (["harness", "verify"], ["ppo-verify"]):
        done = run_without("pytest", [*command, "--target", "tinygrpo.target:factory", "--check", "short_window",
                                      "--check", "extremes", "--report-dir", str(tmp_path / command[-1])], tmp_path,
                           pythonpath=str(ROOT / "examples" / "external_grpo" / "src"))  # fmt: skip
        shown = f"exit {done.returncode}\nstdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
        assert done.returncode == 0 and "2 passed in" in done.stdout, shown


def test_the_engine_imports_no_pytest():
    """`import harness.engine` (and the command that drives it) leaves pytest unimported."""
    code = "import sys, harness.engine, harness.verify_command, harness.cli; sys.exit('pytest' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(("target", "extra"), [("trl", "trl-ppo"), ("trl-grpo", "trl")])
def test_a_trl_target_without_trl_names_its_extra(target, extra, tmp_path):
    done = run_without("trl", ["harness", "verify", "--target", target, "--report-dir", str(tmp_path)], tmp_path)
    one_line(done, f"error: {target} target needs trl", f"pip install 'ppo-stats-harness[{extra}]'")


def test_the_ppo_adapter_on_a_trl_without_ppo_names_the_trl_ppo_extra(tmp_path):
    """TRL's newest release (a folder first on the path, as `nox -s tests` names it) has no PPOTrainer."""
    folder = os.environ.get("PPO_HARNESS_TRL_NEWEST")
    if not folder:
        pytest.skip("no folder holding TRL's newest release (nox -s tests names one in PPO_HARNESS_TRL_NEWEST)")
    done = run_without("none", ["harness", "verify", "--target", "trl", "--report-dir", str(tmp_path)], tmp_path,
                       pythonpath=folder)  # fmt: skip
    one_line(done, "error: trl target: trl 1.16.0 is installed, and it has no PPOTrainer",
             "pip install 'ppo-stats-harness[trl-ppo]'")  # fmt: skip


def test_a_defect_of_the_harness_itself_keeps_its_traceback():
    """An import of one of this project's own modules that fails is a defect, not a missing install."""
    def broken() -> int:
        import harness.no_such_module  # noqa: F401

        return 0

    with pytest.raises(ModuleNotFoundError):
        needs.guarded("python -m harness verify", broken)


def test_the_line_names_the_module_an_import_error_was_raised_from():
    """transformers raises its own ImportError (no module name) from the ModuleNotFoundError of what it lacks."""
    try:
        try:
            raise ModuleNotFoundError("No module named 'torch'", name="torch")
        except ModuleNotFoundError as inner:
            raise ImportError("Could not import module 'AutoModel'.\nSet the logging verbosity to DEBUG") from inner
    except ImportError as exc:
        said = needs.line("python -m harness.live", exc)
    assert said == ("error: python -m harness.live needs torch, which cannot be imported (Could not import module "
                    f"'AutoModel'.): {needs.TORCH}")  # fmt: skip
