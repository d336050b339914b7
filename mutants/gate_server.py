"""The gate server: one process imports the gate's heavy modules once, then forks a child per gate run.

Run by gate_client.GateServer as `python -c <runpy of this file> CONFIG_JSON`, with its cwd and
PYTHONPATH a pristine copy of the project (the *base*). It imports only the standard library
itself (it must not find this package or the project's own `reference_trainers`). At start it
imports every module the config's `preload` names, checks that none of its `forbidden` packages
(the trainers) got imported with them and that it runs no second thread, and says so on stdout:
`{"ready": true, "seconds": S}` or `{"error": WHY}`. The config's `poll` (seconds, default POLL) paces its looks
at the children's deadlines.

Then each line on stdin is one run, `{"id", "root", "module", "args", "log", "timeout", "record",
"imports", "preimport"}` and optionally `"env"`, `"path"` and `"stderr"`, and it forks a child that does
what `python -m MODULE ARGS` with cwd `root` and PYTHONPATH `path` (default: `root`) would: its own process
group, stdin from /dev/null, stdout into `log` and stderr there too (or into `stderr`), `env` (when given)
as its whole environment (else the server's, PYTHONPATH set to `path`), `path` in place of the server's
PYTHONPATH on sys.path (the root's `reference_trainers` is the one imported, since the server never
imported one; the environment variables that the preloaded modules read as they were imported are the
server's: a caller sends a run here only where those agree), the `preimport` modules imported from
there (one that fails to import is left for the run to import, and fail, itself: for the children
the run forks, which inherit them), MODULE run as `__main__`, then the names and files of the modules
of the `record` packages it loaded written to `imports` (JSON), its exit handlers (atexit) run and
its standard streams flushed, and `os._exit` with the module's exit code (the teardown of the modules
the server preloaded is not the run's; the server froze them, `gc.freeze`, so that the collections
of each run skip them too, as a `python -m harness` process's skip its imports: harness/heap.py).
A child shares nothing with another: each is forked from the server, which never runs a gate itself.
When a child ends the server answers `{"id", "returncode"}` (negative: killed by that signal, as
subprocess says it); one still running after `timeout` seconds has its group killed (SIGKILL) and
is answered `{"id", "timed_out": true}`. At the end of stdin it kills what still runs and exits.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import json
import os
import runpy
import select
import signal
import sys
import threading
import time
import traceback
from typing import NoReturn

POLL = 0.1
"""Seconds between looks at the children's deadlines while nothing happens (the config's `poll` may set another). A
child's end does not wait for it: SIGCHLD writes to a pipe the server's select watches (`signal.set_wakeup_fd`), so
that each run is answered as it ends, not up to a poll later (a mean of half a poll on each of a curated run's 137
gates, and on each of the suite's own)."""

WAKE: tuple[int, int] = (-1, -1)
"""The server's wake-up pipe (read end, write end); a child closes both."""


def send(fd: int, message: dict) -> None:
    """One JSON line to the runner (only the server writes there: its children close the pipe)."""
    data = (json.dumps(message) + "\n").encode()
    try:
        while data:
            data = data[os.write(fd, data) :]
    except BrokenPipeError:  # the runner is gone: there is nobody left to tell
        pass


def preload(modules: list[str], forbidden: list[str]) -> str:
    """Import `modules`; why the server cannot fork gates from this process ("" when it can)."""
    try:
        for name in modules:
            importlib.import_module(name)
    except BaseException:  # noqa: BLE001 - whatever the import raised is the answer
        return "preloading failed:\n" + traceback.format_exc()
    leaked = sorted(name for name in sys.modules if name.partition(".")[0] in forbidden)
    if leaked:
        return f"preloading imported {', '.join(leaked)}: each run must import its own"
    # a fork copies one thread only: a lock another thread held stays held in the child for ever
    if threading.active_count() > 1:
        return f"preloading started threads: {', '.join(t.name for t in threading.enumerate())}"
    tasks = "/proc/self/task"  # the native threads too, where the system lists them
    if os.path.isdir(tasks) and len(os.listdir(tasks)) > 1:
        return f"preloading started {len(os.listdir(tasks)) - 1} native thread(s)"
    return ""


def exit_code(code: object) -> int:
    """The exit status of `SystemExit(code)`, as the interpreter makes it (printing a non-int code)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def child(request: dict, base: str, replies: int) -> NoReturn:
    """In the forked child: the run of `python -m MODULE ARGS` in `root`, ending the child with its exit code."""
    os.setpgid(0, 0)
    os.close(replies)
    signal.set_wakeup_fd(-1)  # the server's wake-up pipe and SIGCHLD handler are not the run's
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for fd in WAKE:
        os.close(fd)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a fresh interpreter
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    # one open file for both streams unless stderr has its own (two opens of one file would overwrite each other)
    for fds, name in (((1, 2), "log"),) if not request.get("stderr") else (((1,), "log"), ((2,), "stderr")):
        out = os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        for fd in fds:
            os.dup2(out, fd)
        os.close(out)
    root = request["root"]
    os.chdir(root)
    path = request.get("path", [root])
    if request.get("env") is not None:  # the run's whole environment, its PYTHONPATH too, as a fresh process has it
        os.environ.clear()
        os.environ.update(request["env"])
    else:
        os.environ["PYTHONPATH"] = os.pathsep.join(path)
    served = [entry for entry in base.split(os.pathsep) if entry]
    at = next((i for i, entry in enumerate(sys.path) if entry in served), 1 if sys.path[:1] == [""] else 0)
    sys.path[:] = [entry for entry in sys.path if entry not in served]
    sys.path[at:at] = path  # where PYTHONPATH's entries stand, after the cwd's
    importlib.invalidate_caches()
    for name in request.get("preimport", ()):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001, S112 - the run imports it again and fails there, as a fresh one would
            continue
    sys.argv = [request["module"], *request["args"]]  # run_module puts the module's file first, as -m does
    try:
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exit_code(exc.code)
    except BaseException:  # noqa: BLE001 - an uncaught exception ends `python -m` with its traceback and 1
        traceback.print_exc()
        code = 1
    record = set(request.get("record", ()))
    imported = {
        name: getattr(module, "__file__", None)
        for name, module in list(sys.modules.items())
        if name.partition(".")[0] in record
    }
    with open(request["imports"], "w", encoding="utf-8") as out:
        json.dump(imported, out, indent=1, sort_keys=True)
    # as a forked child ends (os.fork's documentation; multiprocessing's children end so): the run's exit
    # handlers and buffered output, then os._exit, without the teardown of every module the server
    # preloaded, which is not the run's and took 1 to 1.5 s (docs/development.md, "The collector and the
    # imported heap")
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def drain(fd: int) -> None:
    """Read what the non-blocking `fd` holds, to its end."""
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def kill(pid: int) -> None:
    """SIGKILL the child's process group (what it started too), if it is still there."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def serve(modules: list[str], forbidden: list[str], poll: float = POLL) -> int:
    """The server's loop; in a forked child, that child's exit code instead."""
    global WAKE
    replies = os.dup(1)
    os.dup2(2, 1)  # what a preloaded module prints goes to the server's log, not into the replies
    # Ctrl-C reaches the runner's whole process group: the runner's exit closes stdin, and the end
    # of stdin kills the children, whose groups the terminal's signal does not reach
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    started = time.perf_counter()
    why = preload(modules, forbidden)
    if why:
        send(replies, {"error": why})
        return 2
    # every child's collections skip what the preloading left (the harness's heap.py says why: a full collection
    # walks every object the imports left, in runs that may train for less than a second)
    gc.freeze()
    WAKE = os.pipe()
    for fd in WAKE:
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(WAKE[1])
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a Python handler, so that the C one writes to the pipe
    send(replies, {"ready": True, "seconds": round(time.perf_counter() - started, 3)})
    base = os.environ.get("PYTHONPATH", "")
    running: dict[int, tuple[int, float]] = {}  # pid -> (request id, deadline)
    killed: set[int] = set()
    pending, reading = b"", True
    while reading or running:
        ready = select.select([0, WAKE[0]] if reading else [WAKE[0]], [], [], poll)[0]
        if WAKE[0] in ready:
            drain(WAKE[0])
        if 0 in ready:
            chunk = os.read(0, 1 << 16)
            if not chunk:
                reading = False
                for pid in running:  # the runner is gone or done: nobody waits for these any more
                    kill(pid)
            pending += chunk
            while b"\n" in pending:
                line, _, pending = pending.partition(b"\n")
                request = json.loads(line)
                sys.stdout.flush()  # what preloading left in the buffers is the server's, not the child's to write
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    child(request, base, replies)
                try:
                    os.setpgid(pid, pid)  # also here: a kill before the child's own setpgid must reach it
                except (ProcessLookupError, PermissionError):
                    pass
                running[pid] = (request["id"], time.monotonic() + float(request["timeout"]))
        while running:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            ident, _ = running.pop(pid)
            if pid in killed:
                send(replies, {"id": ident, "timed_out": True})
            else:
                send(replies, {"id": ident, "returncode": os.waitstatus_to_exitcode(status)})
            killed.discard(pid)
        now = time.monotonic()
        for pid, (_, deadline) in running.items():
            if now > deadline and pid not in killed:
                kill(pid)
                killed.add(pid)
    return 0


if __name__ == "__main__":
    config = json.loads(sys.argv[1])
    sys.exit(serve(config["preload"], config["forbidden"], config.get("poll", POLL)))
