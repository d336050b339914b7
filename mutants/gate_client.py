"""The runner's side of the gate server (gate_server.py): what it preloads, and the client that starts it and
hands it runs.

A run forked from the server is the `python -m MODULE ARGS` a fresh process would be, without each run's seconds
of importing torch, transformers, accelerate and the harness: the curated runner's gates (harness_run.py) and the
test suite's gate processes (tests/support/forked.py) go through it.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from .project import copy_project, scratch_env

PRELOAD = (
    "torch",
    "torch._dynamo",
    "transformers",
    "transformers.models.llama.modeling_llama",
    "transformers.models.auto.modeling_auto",
    "accelerate",
    "harness",
    "harness.cli",
    "harness.engine",
    "harness.verify_command",
    "harness.preflight",
    "harness.instrument.observe",
    "harness.report.terminal",
    "hypothesis",
)
"""What the gate server imports before it forks, besides the algorithms' modules (`preload_modules`): what every gate
imports (the engine, harness/engine.py, and the command that drives it), but no trainer."""

TRAINER_PACKAGES = ("reference_trainers", "reference_ppo")
"""The packages a mutant patches (reference_ppo's modules are reference_trainers'): never preloaded."""

RECORDED = (*TRAINER_PACKAGES, "harness")
"""The packages whose modules a forked run lists with their files (_imports.json), to check where they came from."""


def preload_modules() -> tuple[str, ...]:
    """PRELOAD, then each registered algorithm's module and the modules of its scenarios' checks (the registry's,
    never typed here)."""
    from harness.algorithms import found, get, known_algorithms

    modules = [found()[name].partition(":")[0] for name in known_algorithms()]
    modules += [scenario.check.__module__ for name in known_algorithms() for scenario in get(name).scenarios]
    return tuple(dict.fromkeys([*PRELOAD, *modules]))


SERVER = Path(__file__).with_name("gate_server.py")
BOOT = "import runpy, sys; runpy.run_path(sys.argv.pop(1), run_name='__main__')"
"""Run the server's file without putting its folder (this package) on sys.path, as `python FILE` would."""


class GateServer:
    """The runner's side of gate_server.py: one server for a session, any number of threads running gates through it.

    The server runs from a pristine copy of the project (its `base`, made here), with the
    environment of a scratch run there (project.scratch_env), so every preloaded module was
    imported as a fresh gate process would import it; or, given `base` and `env`, from the caller's
    folder in the caller's environment (the test suite's, tests/support/forked.py). `close` ends it
    and every run still in it.
    """

    def __init__(
        self, preload: tuple[str, ...] | None = None, start_timeout: float = 600.0, base: Path | None = None,
        env: dict[str, str] | None = None, forbidden: tuple[str, ...] = TRAINER_PACKAGES, poll: float | None = None,
    ) -> None:  # fmt: skip
        """`base` and `env`: a project folder of the caller's and the server's environment (its PYTHONPATH among
        them), instead of a pristine copy made here and a scratch run's environment there; `forbidden`: the
        packages preloading must not import; `poll`: the seconds between the server's looks at its children's
        deadlines (gate_server.py's POLL when None; a child's end is answered at once whatever it is)."""
        self.owned = base is None
        self.base = Path(tempfile.mkdtemp(prefix="ppo-mutant-server-")) if base is None else base
        if self.owned:
            copy_project(self.base)
        self.start_timeout = start_timeout
        fd, log_path = tempfile.mkstemp(prefix="ppo-gate-server-", suffix=".log")
        self._log_path = Path(log_path)
        self._log = os.fdopen(fd, "w", encoding="utf-8")  # open until close()
        modules = preload_modules() if preload is None else preload
        config = json.dumps({"preload": list(modules), "forbidden": list(forbidden),
                             **({} if poll is None else {"poll": poll})})  # fmt: skip
        self.env = scratch_env(self.base) if env is None else dict(env)
        self._proc = subprocess.Popen(
            [sys.executable, "-c", BOOT, str(SERVER), config],
            cwd=self.base,
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )
        self._lock = threading.Lock()  # the request ids, the waiting runs and the pipe to the server
        self._start_lock = threading.Lock()  # the first run waits for the preloading, the others for it
        self._replies: dict[int, queue.SimpleQueue] = {}
        self._next = 0
        self._gone = ""
        self._ready: queue.SimpleQueue = queue.SimpleQueue()
        self._started: dict | None = None
        self._reader = threading.Thread(target=self._read, name="gate-server-replies", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        """Hand each reply line to the run waiting for it; at the server's end, end every run still waiting."""
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            message = json.loads(line)
            if "id" in message:
                with self._lock:
                    waiting = self._replies.pop(message["id"])
                waiting.put(message)
            else:
                self._ready.put(message)
        code = self._proc.wait()
        with self._lock:
            self._gone = f"the gate server ended (exit code {code}):\n{log_tail(self.server_log())}"
            waiting_runs = list(self._replies.values())
            self._replies.clear()
        self._ready.put({"error": self._gone})
        for waiting in waiting_runs:
            waiting.put({"lost": self._gone})

    def server_log(self) -> str:
        """What the server itself printed (preloading's warnings, a crash of the server); "" once closed."""
        if self._log.closed:
            return ""
        self._log.flush()
        return self._log_path.read_text(encoding="utf-8", errors="replace")

    def started(self) -> str:
        """Wait for the server's preloading; why it cannot run gates ("" when it can)."""
        with self._start_lock:
            if self._started is None:
                try:
                    self._started = self._ready.get(timeout=self.start_timeout)
                except queue.Empty:
                    self._started = {"error": f"the gate server did not start in {self.start_timeout:.0f} s"}
        error = self._started.get("error")
        return "" if error is None else f"{error}\n{log_tail(self.server_log())}"

    def run(
        self, root: Path, args: list[str], log: Path, timeout: float, imports: Path, module: str = "harness",
        preimport: tuple[str, ...] = (), env: dict[str, str] | None = None, path: list[str] | None = None,
        stderr: Path | None = None,
    ) -> tuple[int | None, str]:  # fmt: skip
        """`python -m MODULE ARGS` in `root`, forked from the server: (exit code or None, a problem or "").

        `preimport`: modules the child imports from `root` before it runs MODULE; `env`, `path` (PYTHONPATH's
        entries) and `stderr` (its own file) as gate_server.py takes them."""
        why = self.started()
        if why:
            return None, why
        reply: queue.SimpleQueue = queue.SimpleQueue()
        request = {
            "root": str(root),
            "module": module,
            "args": list(args),
            "log": str(log),
            "timeout": timeout,
            "record": list(RECORDED),
            "imports": str(imports),
            "preimport": list(preimport),
            **({} if env is None else {"env": env}),
            **({} if path is None else {"path": path}),
            **({} if stderr is None else {"stderr": str(stderr)}),
        }
        with self._lock:
            if self._gone:
                return None, self._gone
            request["id"] = self._next
            self._next += 1
            self._replies[request["id"]] = reply
            assert self._proc.stdin is not None
            try:
                self._proc.stdin.write((json.dumps(request) + "\n").encode())
                self._proc.stdin.flush()
            except OSError as exc:
                del self._replies[request["id"]]
                return None, f"the gate server took no request ({exc}):\n{log_tail(self.server_log())}"
        # the server kills a child at `timeout`; the margin only guards against a server that stopped answering
        try:
            message = reply.get(timeout=timeout + 120)
        except queue.Empty:
            return None, f"the gate server did not answer within {timeout + 120:.0f} s"
        if "lost" in message:
            return None, message["lost"]
        if message.get("timed_out"):
            return None, f"timed out after {timeout:.0f} s"
        return int(message["returncode"]), ""

    @property
    def requests(self) -> int:
        """How many runs were handed to the server so far."""
        return self._next

    def close(self) -> None:
        """End the server (it kills any run still going) and remove its copy of the project; again, nothing."""
        if self._log.closed:
            return
        try:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
            self._proc.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            self._proc.kill()
            self._proc.wait()
        self._reader.join(timeout=10)
        self._log.close()
        self._log_path.unlink(missing_ok=True)
        if self.owned:
            shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> GateServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def can_fork() -> bool:
    """Whether gates may be forked from a preloaded process here: Linux only (macOS frameworks refuse forks
    after they started, and Windows has no fork)."""
    return sys.platform.startswith("linux")


def log_tail(text: str, lines: int = 25) -> str:
    """The end of a run's log, enough to say why it erred without the whole of it."""
    return "\n".join(text.rstrip().splitlines()[-lines:])
