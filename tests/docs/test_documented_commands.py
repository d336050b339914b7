"""Every shell command in README.md and docs/*.md is in tests/docs/documented.py's registry, and every registered
command is still in the docs; the registry's cheap commands run here, with the exit code and the lines the docs
state; each command a named test runs is named in that test's file."""

from __future__ import annotations

import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.docs import documented
from tests.docs.documented import BY_TEST, NOT_RUN, ROOT, RUN
from tests.support import forked

REGISTRY = documented.registry()


def test_every_documented_command_is_registered():
    missing = {line: where for line, where in documented.documented().items() if line not in REGISTRY}
    assert not missing, (
        "commands the docs show that tests/docs/documented.py does not register (run them, name the test that "
        "runs them, or say why they cannot run):\n"
        + "\n".join(f"  {c!r}  ({', '.join(w)})" for c, w in missing.items())
    )


def test_every_registered_command_is_documented():
    shown = documented.documented()
    stale = [line for line in REGISTRY if line not in shown]
    assert not stale, f"registered in tests/docs/documented.py but in no doc any more (remove them): {stale}"


def test_each_entry_says_how_it_is_held():
    for command in REGISTRY.values():
        assert command.how in (RUN, BY_TEST, NOT_RUN), command
        assert (command.how == NOT_RUN) == bool(command.why), command
        assert (command.how == BY_TEST) == bool(command.test), command
        assert (command.how == RUN) == (command.exit is not None), command


@pytest.mark.parametrize("line", [c.line for c in REGISTRY.values() if c.how == BY_TEST])
def test_the_named_test_runs_the_documented_command(line):
    """The test file names the command, word for word, and has the named test (or fixture)."""
    path, _, name = REGISTRY[line].test.partition("::")
    source = (ROOT / path).read_text(encoding="utf-8")
    assert re.search(rf"^(?:async )?def {re.escape(name)}\(", source, flags=re.M), f"{path} has no {name}"
    assert repr(line) in source or f'"{line}"' in source, f"{path} does not name the documented command {line!r}"


def test_the_extractor_reads_blocks_spans_and_continuations():
    text = "\n".join([
        "Run `python -m harness checks\n--target reference-grpo` or `ppo-verify` (a name).", "",
        "    $ nox -s verify \\", "        -- -v   # every metric", "    PPO statistics verify: PASS", "",
        "```python", "python -m not_a_command", "```", "```bash", "pip install 'a # b'  # a comment", "```",
    ])  # fmt: skip
    path = ROOT / "reports" / "docs-extractor-probe.md"
    path.parent.mkdir(exist_ok=True)
    try:
        path.write_text(text)
        found = [c for c, _ in documented.commands_in(path)]
    finally:
        path.unlink()
    assert sorted(found) == sorted(["python -m harness checks --target reference-grpo", "nox -s verify -- -v",
                                    "pip install 'a # b'"])  # fmt: skip


def run_here(line: str, cwd: Path) -> subprocess.CompletedProcess:
    """A documented command from a folder that has the repository's `baselines` and `examples` (so that its reports
    stay out of the work tree), with the project importable, as a reader's shell in a clone runs it."""
    assigned, args = documented.split(line)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GITHUB_STEP_SUMMARY": "", "TRL_EXPERIMENTAL_SILENCE": "1"}
    # the command's own PYTHONPATH first (relative, as in a clone), then the project, then the one inherited
    path = [assigned.pop("PYTHONPATH", ""), str(ROOT), os.environ.get("PYTHONPATH", "")]
    env.update(assigned, PYTHONPATH=os.pathsep.join(filter(None, path)))
    return forked.run(args, cwd=cwd, env=env, timeout=300)


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """Every `run` command of the registry, two at a time, each in a folder of its own."""
    lines = [c.line for c in REGISTRY.values() if c.how == RUN]
    folders = []
    for k, _ in enumerate(lines):
        folder = tmp_path_factory.mktemp(f"documented-{k}")
        for name in ("baselines", "examples"):
            (folder / name).symlink_to(ROOT / name)
        folders.append(folder)
    with ThreadPoolExecutor(2) as pool:
        return dict(zip(lines, pool.map(run_here, lines, folders)))


@pytest.mark.parametrize("line", [c.line for c in REGISTRY.values() if c.how == RUN])
def test_the_documented_command_does_what_the_docs_say(line, ran):
    command, done = REGISTRY[line], ran[line]
    output = done.stdout + done.stderr
    said = f"{line}: exit {done.returncode}, the docs say {command.exit}\n{output[-3000:]}"
    assert done.returncode == command.exit, said
    for said in command.says:
        assert said in output, f"{line}: its output has no {said!r}\n{output[-3000:]}"
