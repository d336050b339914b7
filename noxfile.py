"""Entry points. `nox -l` is the menu; `nox -s verify` is the CI gate (CPU)."""

from __future__ import annotations

import os
import subprocess
import sys

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
    """Harness overhead, recording memory vs vocabulary, verify wall time: ratios from one run."""
    install(session, "test")
    run_exit_code(session, "-m", "harness.bench", *session.posargs)
