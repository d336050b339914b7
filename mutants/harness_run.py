"""The gate run in a scratch copy: `python -m harness verify` (or `verify-dist`) there, and the checks it reported.

The copy's folder is first on PYTHONPATH (project.scratch_env), so its `reference_trainers`,
patched or not, is the one the gate imports.

A run is a fresh `python -m harness` process, or, given a GateServer (Linux), a child forked
from one process that has imported torch, transformers, accelerate and the harness
once (gate_server.py), but no trainer: the child imports the scratch copy's
`reference_trainers` itself, exactly as the fresh process would, and saves each run the
seconds of those imports. A `verify-dist` run forked so forks its ranks from itself in turn
(harness/dist.py, `--launch fork`): they share the child's process group, which the server
kills at the run's timeout.
"""

from __future__ import annotations

import json
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
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


@dataclass
class RunOutcome:
    """One `python -m harness ...` run in a scratch copy."""

    returncode: int | None
    checks: list[dict]
    seconds: float
    log: str
    problem: str = ""
    imported: dict[str, str | None] = field(default_factory=dict)
    """A forked run's modules of RECORDED and their files (empty for a fresh process)."""

    @property
    def failed(self) -> list[str]:
        """The ids of the checks that failed, named by the mutant or not."""
        return [c["id"] for c in self.checks if c.get("status") == "fail"]


def harness_command(
    command: str, report_dir: Path, selection: list[str] | tuple[str, ...] = (), target: str = "reference"
) -> list[str]:
    """The gate's command line in a scratch copy: verify against a reference trainer, or verify-dist."""
    args = [sys.executable, "-m", "harness", command, "--target", target, "--report-dir", str(report_dir)]
    if command == "verify":
        args += [f"--check={check}" for check in selection]
    return args


def read_checks(report_dir: Path) -> tuple[list[dict], str]:
    """Checks of every JSON report under `report_dir` (verify.json; verify-dist writes dist/verify.json)."""
    files = sorted(report_dir.rglob("*.json"))
    if not files:
        return [], f"no JSON report in {report_dir}"
    checks: list[dict] = []
    for path in files:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            return [], f"{path.name} is unreadable: {exc}"
        found = data.get("checks") if isinstance(data, dict) else None
        if not isinstance(found, list):
            return [], f"{path.name} has no list of checks"
        checks += [c for c in found if isinstance(c, dict) and "id" in c and "status" in c]
    return checks, ""


class GateServer:
    """The runner's side of gate_server.py: one server for a session, any number of threads running gates through it.

    The server runs from a pristine copy of the project (its `base`, made here), with the
    environment of a scratch run there (project.scratch_env), so every preloaded module was
    imported as a fresh gate process would import it. `close` ends it and every run still in it.
    """

    def __init__(self, preload: tuple[str, ...] | None = None, start_timeout: float = 600.0) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="ppo-mutant-server-"))
        copy_project(self.base)
        self.start_timeout = start_timeout
        self._log = open(self.base / "_server.log", "w", encoding="utf-8")  # noqa: SIM115 - open until close()
        modules = preload_modules() if preload is None else preload
        config = json.dumps({"preload": list(modules), "forbidden": list(TRAINER_PACKAGES)})
        self._proc = subprocess.Popen(
            [sys.executable, "-c", BOOT, str(SERVER), config],
            cwd=self.base,
            env=scratch_env(self.base),
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
        return (self.base / "_server.log").read_text(encoding="utf-8", errors="replace")

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
        preimport: tuple[str, ...] = (),
    ) -> tuple[int | None, str]:  # fmt: skip
        """`python -m MODULE ARGS` in `root`, forked from the server: (exit code or None, a problem or "").

        `preimport`: modules the child imports from `root` before it runs MODULE (gate_server.py)."""
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
        shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> GateServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def can_fork() -> bool:
    """Whether gates may be forked from a preloaded process here: Linux only (macOS frameworks refuse forks
    after they started, and Windows has no fork)."""
    return sys.platform.startswith("linux")


def trainer_modules(root: Path) -> tuple[str, ...]:
    """Every module of the trainer packages in the copy under `root`, by name."""
    return tuple(
        f"{package}.{path.stem}" if path.stem != "__init__" else package
        for package in TRAINER_PACKAGES
        for path in sorted((root / package).glob("*.py"))
    )


def imported_elsewhere(imported: dict[str, str | None], scratch: Path) -> list[str]:
    """Each trainer module of a forked run that was not imported from the scratch copy, with its file."""
    root = scratch.resolve()
    return [
        f"{name} from {path}"
        for name, path in sorted(imported.items())
        if name.partition(".")[0] in TRAINER_PACKAGES
        and path is not None
        and not Path(path).resolve().is_relative_to(root)
    ]


def run_harness(
    scratch: Path,
    command: str = "verify",
    selection: list[str] | tuple[str, ...] = (),
    timeout: float = 900.0,
    target: str = "reference",
    server: GateServer | None = None,
) -> RunOutcome:
    """Run the gate in `scratch` and collect its checks (forked from `server` when given one)."""
    report_dir = scratch / "_report"
    shutil.rmtree(report_dir, ignore_errors=True)
    report_dir.mkdir()
    log_path = scratch / "_run.log"
    args = harness_command(command, report_dir, selection, target)
    imported: dict[str, str | None] = {}
    start = time.perf_counter()
    if server is not None:
        imports = scratch / "_imports.json"
        # verify-dist's ranks import the trainer, in children of the forked run that _imports.json cannot list:
        # the run imports the copy's trainer modules first, which the ranks then inherit, and lists them
        preimport = trainer_modules(scratch) if command == "verify-dist" else ()
        code, problem = server.run(scratch, args[3:], log_path, timeout, imports, preimport=preimport)
        if imports.is_file():
            imported = json.loads(imports.read_text(encoding="utf-8"))
        elsewhere = imported_elsewhere(imported, scratch)
        if elsewhere and not problem:
            problem = f"the trainer was not imported from the scratch copy: {'; '.join(elsewhere)}"
    else:
        code, problem = run_process(scratch, args, log_path, timeout)
    seconds = time.perf_counter() - start
    text = log_path.read_text(encoding="utf-8", errors="replace") if log_path.is_file() else ""
    checks, unreadable = read_checks(report_dir)
    if code is not None and unreadable and code in (0, 1) and not problem:
        problem = unreadable
    return RunOutcome(code, checks, seconds, text, problem, imported)


def run_process(scratch: Path, args: list[str], log_path: Path, timeout: float) -> tuple[int | None, str]:
    """`args` as a fresh process in `scratch` (its output into `log_path`): (exit code or None, a problem or "")."""
    with open(log_path, "w", encoding="utf-8") as log:
        try:
            proc = subprocess.run(
                args,
                cwd=scratch,
                env=scratch_env(scratch),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=timeout,
            )
            return proc.returncode, ""
        except subprocess.TimeoutExpired:
            return None, f"timed out after {timeout:.0f} s"


def log_tail(text: str, lines: int = 25) -> str:
    """The end of a run's log, enough to say why it erred without the whole of it."""
    return "\n".join(text.rstrip().splitlines()[-lines:])
