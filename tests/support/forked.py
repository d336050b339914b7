"""`python -m harness ...` as the suite's tests run it: a child forked from one preloaded process per pytest worker.

A gate process spends 2 to 3 s importing torch, transformers and accelerate before it runs a check (5 s more for
TRL's trainer, whose module imports pandas, datasets and transformers' processing utilities: PRELOAD_TOO), and the
suite starts about ninety of them outside the curated catalogue (which forks its own: mutants/gate_client.py).
`run` hands each to one gate server per pytest worker (the curated runner's, mutants/gate_server.py, with the
project itself as its base and the test's environment): the child does what the fresh process would, from the same
cwd, PYTHONPATH and environment, with its own stdout and stderr, and its exit code (a signal as -N) and a timeout
come back as subprocess.run gives them.

A run goes to a fresh process instead when the server cannot serve it as that process would: another program or
module than `python -m harness`, an environment that differs from the server's in a variable the preloaded
modules may have read as they were imported (anything but RUN_TIME and the harness's own `PPO_HARNESS_*`), no
fork (not Linux), a server that could not start (a warning says why), or PPO_HARNESS_FRESH_PROCESSES set
(`PPO_HARNESS_FRESH_PROCESSES=1 nox -Rs tests` runs every gate as a fresh process). The tests that are about the
process itself (the heap a gate process freezes, a gate without pytest installed) call subprocess.run themselves.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

from mutants.gate_client import TRAINER_PACKAGES, GateServer, can_fork, preload_modules

ROOT = Path(__file__).resolve().parents[2]

RUN_TIME = frozenset({"PYTHONPATH", "PYTEST_CURRENT_TEST", "GITHUB_STEP_SUMMARY", "TRL_EXPERIMENTAL_SILENCE",
                      "TORCHINDUCTOR_CACHE_DIR"})  # fmt: skip
"""Variables only a run reads (the harness, or TRL as the run imports it), never a preloaded module: a run may set
them otherwise than the server. TORCHINDUCTOR_CACHE_DIR is set in the test's own process by importing TRL's
trainer there (torch's inductor writes it where its `cache_dir()` is first asked, and reads it only then)."""

SERVER_ENV = {"OMP_NUM_THREADS": "1", "GITHUB_STEP_SUMMARY": "", "TRL_EXPERIMENTAL_SILENCE": "1"}
"""What the suite's gate runs set (tests/support/gate_run.py), so that the server's environment is theirs."""

NO_ALLOCATOR_THREAD = {"JE_ARROW_MALLOC_CONF": "background_thread:false"}
"""Set for the whole suite (tests/conftest.py, before any server starts, so that every run's environment has it
too): pyarrow's bundled jemalloc, which pandas and datasets load, then starts no background thread to purge its
pages, and a process that imported them can fork. It changes no number: only when arrow's buffers return memory."""

PRELOAD_TOO = ("transformers.image_processing_utils", "pandas", "datasets")
"""Besides every gate's imports (gate_client.preload_modules): what TRL's trainer module imports that costs most,
whatever the TRL release (a run of TRL's imports it in 0.5 s instead of 2 s). pandas and datasets start a thread
(jemalloc's) unless NO_ALLOCATOR_THREAD is set; where it is not, the server refuses to start, warning why."""

FORBIDDEN = (*TRAINER_PACKAGES, "trl", "tests", "tinyppo", "tinygrpo", "verl", "openrlhf")
"""Packages a run imports from its own PYTHONPATH (TRL's newest release, a patched copy): never preloaded."""

_server: GateServer | None = None
_refused = ""


def fresh() -> bool:
    """Whether every run is a fresh process here."""
    return bool(os.environ.get("PPO_HARNESS_FRESH_PROCESSES")) or not can_fork() or bool(_refused)


def server() -> GateServer | None:
    """This worker's gate server, started on first use; None where every run is a fresh process (`fresh`, the
    server's start refused among its reasons: warned once)."""
    global _server, _refused
    if fresh():
        return None
    if _server is None:
        env = {**os.environ, **SERVER_ENV, "PYTHONPATH": str(ROOT)}
        _server = GateServer(preload=(*preload_modules(), *PRELOAD_TOO), base=ROOT, env=env, forbidden=FORBIDDEN)
        atexit.register(_server.close)
        why = _server.started()
        if why:
            _refused = why
            _server.close()
            _server = None
            warnings.warn(f"the suite's gate server did not start; every gate runs as a fresh process: {why}",
                          stacklevel=2)  # fmt: skip
    return _server


def servable(args: Sequence[str], env: Mapping[str, str], served: Mapping[str, str]) -> bool:
    """Whether a child of a server whose environment is `served` runs `args` as a fresh process would."""
    if list(args[:3]) != [sys.executable, "-m", "harness"]:
        return False
    differ = {k for k in env.keys() | served.keys() if env.get(k) != served.get(k)}
    return all(k in RUN_TIME or k.startswith("PPO_HARNESS_") for k in differ)


def run(
    args: Sequence[str], *, cwd: Path | str | None = None, env: Mapping[str, str] | None = None,
    timeout: float | None = None, check: bool = False,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """`subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=check)`, forked
    from this worker's gate server where that is the same run (the module's docstring says where)."""
    env = dict(os.environ if env is None else env)
    own = server()
    if own is None or not servable(args, env, own.env):
        return subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                              check=check)  # fmt: skip
    limit = 3600.0 if timeout is None else timeout
    with tempfile.TemporaryDirectory(prefix="ppo-forked-") as folder:
        out, err, imports = (Path(folder) / name for name in ("stdout", "stderr", "imports.json"))
        path = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
        where = Path(os.getcwd() if cwd is None else cwd).resolve()
        code, problem = own.run(where, list(args[3:]), out, limit, imports, env=env, path=path,
                                stderr=err)  # fmt: skip
        stdout, stderr = (p.read_text(encoding="utf-8", errors="replace") if p.exists() else "" for p in (out, err))
    if problem.startswith("timed out"):
        raise subprocess.TimeoutExpired(list(args), limit, stdout, stderr)
    if code is None:
        raise RuntimeError(f"the suite's gate server lost a run of {' '.join(args[1:])}: {problem}")
    done = subprocess.CompletedProcess(list(args), code, stdout, stderr)
    if check:
        done.check_returncode()
    return done
