"""The suite's gate processes forked from a preloaded server (tests/support/forked.py) are the runs fresh processes
would be: the same exit code, the same verify.json, their trainer from their own PYTHONPATH; and a run the server
could not make so (another program, an import-time variable set otherwise, the switch set) is a fresh process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mutants import catalogue
from tests.support import forked

ROOT = Path(__file__).resolve().parents[1]
HARNESS = [sys.executable, "-m", "harness"]
MUTANT = "g18_mean_of_microbatch_extremes"
"""A curated mutant of the GRPO trainer (class 18) its few named checks kill."""
SERVED = {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "PATH": "/usr/bin"}


@pytest.mark.parametrize("args, changed, served", [
    (HARNESS + ["verify"], {}, True),
    (HARNESS + ["verify"], {"PYTHONPATH": "/elsewhere", "PYTEST_CURRENT_TEST": "t", "PPO_HARNESS_X": "1"}, True),
    (HARNESS + ["verify"], {"GITHUB_STEP_SUMMARY": "", "TRL_EXPERIMENTAL_SILENCE": "1"}, True),
    (HARNESS + ["verify"], {"TORCHINDUCTOR_CACHE_DIR": "inductor-cache"}, True),  # importing TRL in a test sets it
    (HARNESS + ["verify"], {"OMP_NUM_THREADS": "2"}, False),  # torch read it when the server imported it
    (HARNESS + ["verify"], {"HF_HUB_OFFLINE": None}, False),  # as huggingface_hub did, unset
    (HARNESS + ["verify"], {"SOMETHING_NEW": "1"}, False),  # unknown: what reads it is not known
    ([sys.executable, "-m", "pytest"], {}, False),
    ([sys.executable, "-W", "ignore", "-m", "harness"], {}, False),
    (["python3", "-m", "harness"], {}, False),
])  # fmt: skip
def test_only_a_run_of_the_harness_in_the_servers_import_time_environment_is_forked(args, changed, served):
    env = {k: v for k, v in {**SERVED, **changed}.items() if v is not None}
    assert forked.servable(args, env, SERVED) is served


def scratch(tmp_path: Path, mutant: str | None) -> Path:
    """A copy of the project's trainers under `tmp_path`, with the curated `mutant` applied."""
    root = tmp_path / (mutant or "pristine")
    shutil.copytree(ROOT / "reference_trainers", root / "reference_trainers",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    if mutant is not None:
        catalogue.apply(catalogue.by_id([mutant])[0], root)
    return root


def checks(report: Path) -> list[tuple]:
    """Each check's id, status and metrics, as verify.json has them (no timings)."""
    return [(c["id"], c["status"], c["metrics"]) for c in json.loads(report.read_text())["checks"]]


@pytest.mark.slow  # two fresh gate processes beside two forked ones
@pytest.mark.skipif(not forked.can_fork(), reason="gates are forked on Linux only")
def test_a_forked_run_is_the_fresh_process_run_with_its_own_trainer(tmp_path, monkeypatch):
    monkeypatch.delenv("PPO_HARNESS_FRESH_PROCESSES", raising=False)
    server = forked.server()
    assert server is not None, "the suite's gate server did not start"
    named = catalogue.test_selection(catalogue.by_id([MUTANT])[0])  # the checks it names
    for mutant, code in ((None, 0), (MUTANT, 1)):
        root = scratch(tmp_path, mutant)  # the cwd: its reference_trainers first on sys.path, before the project's
        env = {**os.environ, **forked.SERVER_ENV, "PYTHONPATH": str(ROOT)}
        runs = {}
        for how in ("fresh", "forked"):
            args = [*HARNESS, "verify", "--target", "reference-grpo", *(f"--check={c}" for c in named),
                    "--report-dir", str(tmp_path / f"{mutant}-{how}")]  # fmt: skip
            before = server.requests
            done = (subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, timeout=600)
                    if how == "fresh" else forked.run(args, cwd=root, env=env, timeout=600))  # fmt: skip
            assert server.requests == before + (how == "forked")  # the one forked, the other not
            assert done.returncode == code, done.stdout + done.stderr
            verdict = [line for line in done.stdout.splitlines() if line.startswith("GRPO statistics verify:")]
            runs[how] = verdict, checks(tmp_path / f"{mutant}-{how}" / "verify.json")
        assert len(runs["fresh"][0]) == 1  # its verdict line, on stdout
        assert runs["forked"] == runs["fresh"]  # the same verdict and the same numbers, the mutant's failure too


@pytest.mark.skipif(not forked.can_fork(), reason="gates are forked on Linux only")
def test_with_the_switch_set_every_run_is_a_fresh_process(monkeypatch):
    server = forked.server()
    before = None if server is None else server.requests
    monkeypatch.setenv("PPO_HARNESS_FRESH_PROCESSES", "1")
    done = forked.run([*HARNESS, "--version"], cwd=ROOT, timeout=120, check=True)
    assert done.stdout.startswith("ppo-stats-harness ")
    assert server is None or server.requests == before  # nothing went to the server


@pytest.mark.slow  # a fresh process that imports TRL's trainer beside a forked one
@pytest.mark.skipif(not forked.can_fork(), reason="gates are forked on Linux only")
def test_a_forked_trl_run_over_the_preloaded_pandas_and_datasets_is_the_fresh_process_run(tmp_path, monkeypatch):
    pytest.importorskip("trl.trainer.grpo_trainer", reason="TRL's GRPO trainer does not import")
    monkeypatch.delenv("PPO_HARNESS_FRESH_PROCESSES", raising=False)
    assert {"pandas", "datasets"} <= set(forked.PRELOAD_TOO)
    assert os.environ.items() >= forked.NO_ALLOCATOR_THREAD.items()  # else the server would not have started
    server = forked.server()
    assert server is not None, "the suite's gate server did not start"
    env = {**os.environ, **forked.SERVER_ENV, "PYTHONPATH": str(ROOT)}
    runs = {}
    for how in ("fresh", "forked"):
        args = [*HARNESS, "verify", "--target", "trl-grpo", "--check", "extremes",
                "--check", "uneven_lengths[loss_type=dapo]", "--report-dir", str(tmp_path / how)]  # fmt: skip
        before = server.requests
        done = (subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
                if how == "fresh" else forked.run(args, cwd=tmp_path, env=env, timeout=600))  # fmt: skip
        assert server.requests == before + (how == "forked")
        runs[how] = done.returncode, checks(tmp_path / how / "verify.json")
    assert runs["fresh"][0] == 1  # TRL's entropy pooling fails both (class 16): failures compared too
    assert runs["forked"] == runs["fresh"]
