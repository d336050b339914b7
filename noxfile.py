"""Entry points. `nox -l` is the menu; `nox -s verify` is the CI gate (CPU)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import nox

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["verify"]
nox.options.reuse_existing_virtualenvs = True

PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
CPU_THREADS = {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
ROOT = os.path.dirname(os.path.abspath(__file__))
# exact versions for every install a session makes (torch 2.13.0 among them); pyproject.toml has ranges
CONSTRAINTS = os.path.join(ROOT, "constraints.txt")


def install(session: nox.Session, *extras: str) -> None:
    """Install the project with extras under constraints.txt (torch pinned there), then print the stack."""
    session.install("-c", CONSTRAINTS, "--upgrade", "pip", silent=True)
    spec = f".[{','.join(extras)}]" if extras else "."
    session.install("-c", CONSTRAINTS, "-e", spec)
    session.run(
        "python",
        "-c",
        "import sys, torch; print('python', sys.version.split()[0], '| torch', torch.__version__,"
        " '| cuda', torch.cuda.is_available())",
    )


def run_exit_code(session: nox.Session, *args: str, env: dict | None = None) -> None:
    """Run a harness command and make the session exit with its own code (0 pass, 1 fail, 2 usage)."""
    python = os.path.join(session.bin, "python")
    session.log(" ".join(["python", *args]))
    code = subprocess.call([python, *args], env={**os.environ, **CPU_THREADS, **(env or {})})
    if code:
        session.log(f"exit code {code}")
        raise SystemExit(code)


def wants_trl(posargs: list[str]) -> bool:
    return any(a == "trl" or a.endswith("=trl") for a in posargs)


@nox.session(python=PYTHON)
def verify(session: nox.Session) -> None:
    """The gate: every scenario against a target (default: the reference trainer, CPU)."""
    install(session, "test", *(["trl"] if wants_trl(session.posargs) else []))
    run_exit_code(session, "-m", "harness", "verify", *session.posargs)


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The project's own test suite (trainer, harness, TRL verdict, curated mutants, two processes)."""
    install(session, "test", "trl", "mutation")
    session.run("python", "-m", "pytest", "tests", *session.posargs, env=CPU_THREADS)


@nox.session(python=PYTHON, default=False)
def lint(session: nox.Session) -> None:
    """ruff over the code."""
    session.install("-c", CONSTRAINTS, "ruff")
    session.run("ruff", "check", "reference_ppo", "harness", "tests", "mutants", "noxfile.py", *session.posargs)


@nox.session(python=PYTHON, default=False)
def verify_dist(session: nox.Session) -> None:
    """uneven_split, lr0_ratio and freshness on 2 CPU processes (accelerate, gloo)."""
    install(session, "test")
    run_exit_code(session, "-m", "harness", "verify-dist", *session.posargs)


@nox.session(python=PYTHON, default=False)
def verify_gpu(session: nox.Session) -> None:
    """The verify scenarios on CUDA (float32, TF32 off); skipped, visibly, without a CUDA device."""
    install(session, "test")
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)"
    if subprocess.call([os.path.join(session.bin, "python"), "-c", probe]) == 3:
        session.skip("no CUDA device on this machine: verify_gpu did not run (this is not a pass)")
    run_exit_code(session, "-m", "harness", "verify", "--device", "cuda", *session.posargs)


@nox.session(python=PYTHON, default=False)
def mutation(session: nox.Session) -> None:
    """Curated known-bug mutants, then mutmut over the statistics code; writes reports/mutation.*."""
    install(session, "test", "mutation")
    run_exit_code(session, "-m", "mutants", *session.posargs)


@nox.session(python=PYTHON, default=False)
def bench(session: nox.Session) -> None:
    """The gate's cost from one run: overhead, memory, oracle time, profile (-- --size medium --device cuda)."""
    install(session, "test")
    run_exit_code(session, "-m", "harness.bench", *session.posargs)


# what a CUDA build of torch brings along; none of it may be installed by the install check
CUDA_STACK = ("torch", "triton", "nvidia-", "cuda-")
FETCHED = ("Downloading", "Processing")
# left out of the copy that the install check builds from
NOT_SOURCE = (
    ".git",
    ".nox",
    ".venv",
    ".hypothesis",
    "__pycache__",
    "*.egg-info",
    "build",
    "reports",
    "mutants-scratch",
)


@nox.session(python=False, default=False)
def install_check(session: nox.Session) -> None:
    """Installing the package into an environment that has torch 2.13.0 leaves that torch alone."""
    started = time.monotonic()
    scratch = tempfile.mkdtemp(prefix="ppo-install-check-")
    try:
        venv = os.path.join(scratch, "venv")
        session.run(sys.executable, "-m", "venv", venv, external=True)
        python = os.path.join(venv, "bin", "python")
        pip = (python, "-m", "pip")
        session.run(*pip, "install", "--quiet", "--upgrade", "pip", external=True)
        # the trainer's environment: a torch is there first (pinned: an unpinned torch is a CUDA build)
        session.run(*pip, "install", "torch==2.13.0", external=True)
        probe = "import importlib.metadata as m; print(m.version('torch'))"
        before = session.run(python, "-c", probe, external=True, silent=True).strip()
        # the package as a user installs it: no constraints file, pyproject.toml's ranges only
        # (from a copy, so that the build's build/ and *.egg-info stay out of the work tree)
        source = shutil.copytree(ROOT, os.path.join(scratch, "src"), ignore=shutil.ignore_patterns(*NOT_SOURCE))
        report = os.path.join(scratch, "report.json")
        output = session.run(*pip, "install", "--report", report, source, external=True, silent=True)
        after = session.run(python, "-c", probe, external=True, silent=True).strip()
        with open(report, encoding="utf-8") as f:
            installed = sorted(
                f"{item['metadata']['name']}=={item['metadata']['version']}" for item in json.load(f)["install"]
            )
        # what pip fetched: "Downloading <url or file name>", "Processing <local file>"
        fetched = [line.strip() for line in output.splitlines() if line.lstrip().startswith(FETCHED)]
        cuda = [spec for spec in installed if spec.lower().startswith(CUDA_STACK)]
        cuda += [line for line in fetched if re.search(r"\b(torch|triton|nvidia|cuda)[-_]", line.lower())]
        for line in output.splitlines():
            if "satisfied: torch" in line:
                session.log(line.strip())
        session.log(f"torch before: {before} | after: {after}")
        session.log(f"the package's install added {len(installed)} distributions: {', '.join(installed)}")
        if after != before or cuda:
            session.error(f"installing the package changed torch ({before} -> {after}) or fetched {cuda}")
        session.log(f"torch left alone; {time.monotonic() - started:.0f} s")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
