"""Every shell command that README.md and docs/*.md show, in one registry: how each is held to what the docs say.

A command is one of:

- **run** (`run(...)`): tests/docs/test_documented_commands.py runs it from the repository's root and checks its
  exit code and the lines the docs quote from its output. Only commands of a few seconds each: the suite's time
  is CI's time.
- **run by a test** (`by(TEST, ...)`): the named test runs the documented command itself, taking its words from
  here (`argv`), with a report folder of its own appended (`--report-dir`) where the command writes reports, and
  checks what the docs state of it; test_documented_commands.py checks that the test's file names the command.
- **not run** (`not_run(WHY, ...)`): the one place that lists the documented commands the suite cannot run, each
  with the reason (a GPU, tens of minutes, a venv of gigabytes, the network, a form with placeholders).

What counts as a documented command (`documented()`): every line of an indented or unlabelled (or bash, sh,
console) fenced block, and every inline code span with at least one argument, that starts with a program a
reader types (`COMMAND`), after any `VAR=value` assignments. Normalised, harmlessly: a leading `$ `, lines
continued with a backslash joined, a trailing `  # comment` dropped, runs of whitespace made one space (an inline
span broken across lines). Python, TOML and YAML blocks are files, not command lines (the CI workflow's `run:`
steps are the workflow's). Each documented command must be registered under exactly its normalised text, and
each registered command must still be documented.
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))

RUN, BY_TEST, NOT_RUN = "run", "run by a test", "not run"

PROGRAMS = (
    "python", "python3", "nox", "pip", "pip3", "uv", "ppo-verify", "torchrun", "accelerate", "pytest", "mutmut",
    "git", "grep", "mkdir", "cp", "cd", "bash", "sh", "curl", ".ci/run",
)  # fmt: skip
ASSIGNMENT = r"[A-Z_][A-Z0-9_]*=\S*"
COMMAND = re.compile(rf"^(?:{ASSIGNMENT}\s+)*(?:{'|'.join(re.escape(p) for p in PROGRAMS)})(?=\s|$)")
SHELL_FENCES = ("", "bash", "sh", "shell", "console")


@dataclass(frozen=True)
class Command:
    line: str
    how: str
    exit: int | None = None  # run: the exit code
    says: tuple[str, ...] = ()  # run: lines (or parts of lines) its output must have
    test: str = ""  # run by a test: path::function
    why: str = ""  # not run: the reason


def run(line: str, exit: int = 0, says: tuple[str, ...] = ()) -> Command:
    return Command(line, RUN, exit=exit, says=says)


def by(test: str, *lines: str) -> list[Command]:
    return [Command(line, BY_TEST, test=test) for line in lines]


def not_run(why: str, *lines: str) -> list[Command]:
    return [Command(line, NOT_RUN, why=why) for line in lines]


SUITE = "the suite itself (7-8 minutes on 2 CPUs, its venv of gigabytes made first); CI runs it (.ci/run)"
GATE_VENV = ("a nox session: it makes a venv of gigabytes (torch, transformers) and runs both reference gates "
             "(1-2 min); the suite runs the same gates in process (tests/support/gates.py)")  # fmt: skip
MUTATION = "mutation testing: tens of minutes (mutmut over the trainers, or the curated catalogue's ~80 gates)"
BENCH = "the benchmark: a measurement of minutes (the medium size trains 188.5M-parameter models)"
GPU = "needs a CUDA device"
LIVE = "trains a 25M-parameter Llama for minutes (docs/live.md), in a venv of its own"
TRL_INSTALL = "installs another TRL release into a venv (the network, a venv of gigabytes)"
INSTALL = "installs packages (the network; a venv of gigabytes): what the install and example sessions check"
FORM = "a form with placeholders (upper-case words, `...`, `a|b`), not a command to type as it stands"
PROSE = "named in prose, as what a tool runs internally; not a command a reader types"
WHOLE_GATE = ("a whole gate (1-2 min of CPU); the suite holds the same trainer to the same checks (tests/support/"
              "gates.py in process, or the verdict tests named in docs/trl.md and docs/trl-grpo.md)")  # fmt: skip

COMMANDS: tuple[Command, ...] = (
    # run here: a few seconds each
    run("python -m harness --version", says=("ppo-stats-harness ", "contract ppo 4 (docs/metrics.md)",
                                             "contract grpo 13 (docs/grpo-metrics.md)")),  # fmt: skip
    run("python -m harness algorithms", says=("ppo reference", "grpo reference-grpo")),
    run("python -m harness verify --target openrlhf", exit=2, says=("openrlhf is not installed", "nox -s openrlhf")),
    run("python -m harness checks", says=("uneven_split[epochs=1]",)),
    run("python -m harness checks --target reference-grpo", says=("short_window",)),
    run("python -m harness checks --target reference --markdown", says=("| `uneven_split[epochs=1]` |",)),
    run("PYTHONPATH=examples/external_grpo/src python -m harness checks --target tinygrpo.target:factory",
        says=("short_window",)),  # fmt: skip
    run("PYTHONPATH=examples/external_grpo/src python -m harness verify --target tinygrpo.target:factory "
        "--check short_window --check 'logp_gradient[loss_type=dapo]'",
        says=("pass  short_window", "pass  logp_gradient[loss_type=dapo]")),  # fmt: skip
    run("python -m harness verify --target reference-grpo --check extremes --baseline baselines/trl-1.12.0-grpo.toml",
        exit=1,
        says=("STALE extremes  passes: remove it from the baseline baselines/trl-1.12.0-grpo.toml",)),  # fmt: skip
    # run by a named test, which takes the command from here
    *by("tests/harness/test_checks.py::test_docs_checks_md_is_what_the_cli_prints",
        "python -m harness checks --markdown"),  # fmt: skip
    *by("tests/examples/test_example_session.py::"
        "test_the_examples_pass_the_gate_from_a_wheel_and_their_broken_variants_fail_it",
        "nox -s example"),  # fmt: skip
    *by("tests/harness/test_dist.py::test_reference_trainer_passes_across_two_processes",
        "python -m harness verify-dist"),  # fmt: skip
    *by("tests/harness/test_dist.py::test_reference_grpo_trainer_passes_across_two_processes",
        "python -m harness verify-dist --target reference-grpo"),  # fmt: skip
    *by("tests/harness/algorithms/grpo/test_grpo_dist.py::test_trl_grpo_across_two_processes_fails_its_pooling_alone",
        "python -m harness verify-dist --target trl-grpo"),  # fmt: skip
    *by("tests/harness/algorithms/grpo/targets/test_trl_grpo_verdict.py::trl_grpo_verdict",
        "python -m harness verify --target trl-grpo"),  # fmt: skip
    *by("tests/harness/algorithms/grpo/targets/test_trl_grpo_verdict.py::"
        "test_trl_grpo_at_its_bfloat16_default_fails_the_same_checks_with_the_same_diagnoses",
        "python -m harness verify --target trl-grpo --dtype bfloat16"),  # fmt: skip
    # not run here, each with its reason
    *not_run(SUITE, "python3 -m pip install 'nox[uv]' && nox -s tests", "nox -s tests", "nox -Rs tests",
             'nox -Rs tests -- -m "not slow"', "pytest tests -n auto --dist loadfile",
             "pytest tests -n auto --dist loadfile --durations=15", "pytest tests -q --durations=0",
             "pytest tests -q --durations=0 -p no:cacheprovider", "PPO_HARNESS_FRESH_PROCESSES=1 nox -Rs tests"),
    *not_run(GATE_VENV, "python3 -m pip install 'nox[uv]' && nox -s verify",
             "python3 -m pip install nox && nox -s verify", "nox -s verify", "nox -Rs verify",
             "nox -s verify -- -v"),  # fmt: skip
    *not_run(WHOLE_GATE, "python -m harness verify", "python -m harness verify --target reference",
             "python -m harness verify --target reference-grpo", "ppo-verify --target tinygrpo.target:factory",
             "PYTHONPATH=examples/external_grpo/src python -m harness verify --target tinygrpo.target:factory",
             "PYTHONPATH=examples/external_grpo/src python -m harness verify --target tinygrpo.broken:factory",
             "python -m harness verify --target trl-grpo --baseline baselines/trl-1.12.0-grpo.toml",
             "python -m harness verify --target trl-grpo --baseline baselines/trl-1.16.0-grpo.toml",
             "python -m harness verify --target trl --baseline baselines/trl-1.12.0-ppo.toml",
             "python -m harness verify --target trl-grpo --write-baseline my-baseline.toml",
             "nox -s verify -- --target trl"),  # fmt: skip
    *not_run("a measurement (the gate's own time in a fresh process), quoted with its numbers",
             "python -m harness verify --check freshness",
             'python -c "import torch, transformers, accelerate, transformers.models.llama.modeling_llama"',
             ),  # fmt: skip
    *not_run(MUTATION, "nox -s mutation", "nox -s mutation -- mutmut --algorithm grpo", "python -m mutants",
             "python -m mutants curated", "python -m mutants curated --full", "python -m mutants curated --jobs 2",
             "python -m mutants curated --only", "python -m mutants mutmut",
             "python -m mutants mutmut --algorithm grpo",
             "python -m mutants mutmut --algorithm grpo --recheck-triaged",
             "python -m mutants mutmut --functions compute_gae,PPOTrainer.micro_step --max-children 1",
             "python -m mutants mutmut --algorithm grpo --functions ended,sequence_log_ratio,sequence_objective,"
             "sequence_clip_means,token_objective,GRPOTrainer.generate,GRPOTrainer.micro_step,"
             "GRPOTrainer.log_interval,GRPOConfig.__post_init__"),  # fmt: skip
    *not_run("reads a mutmut run's results (reports/mutmut_results.json), which only a mutation run writes",
             "python -m mutants triage", "python -m mutants triage refresh", "python -m mutants report",
             "python -m mutants report --no-install"),  # fmt: skip
    *not_run(BENCH, "nox -s bench", "nox -s bench -- --size medium", "nox -s bench -- --size small",
             "nox -s bench -- --size medium --live", "nox -s bench -- --live", "python -m harness.bench",
             "python -m harness.bench --live", "python -m harness.bench --live --repeat 2 --live-steps 20",
             "python -m harness.bench --size medium --repeat 3", "python -m harness.bench --size medium --repeat 5",
             "python -m harness.bench --size small"),  # fmt: skip
    *not_run(GPU, "nox -s verify_gpu", "python -m harness verify --device cuda",
             "nox -s bench -- --size large --device cuda",
             "nox -s live -- --target trl-grpo --device cuda"),  # fmt: skip
    *not_run(LIVE, "nox -s live", "nox -s live -- --target trl-grpo", "nox -s live -- --target reference-grpo",
             "python -m harness.live"),  # fmt: skip
    *not_run("a nox session of its own venv that runs the verify-dist gates on 2 processes (the suite runs them: "
             "tests/harness/test_dist.py)", "nox -s verify_dist"),  # fmt: skip
    *not_run(TRL_INSTALL, "nox -s trl_newest", "nox -s trl_releases", "nox -s trl_releases -- 1.16.0",
             "nox -s trl_releases -- 1.13.0 1.14.2",
             "nox -s verify -- --target trl --trl ../trl",
             "nox -s verify -- --target trl --trl dist/trl-1.13.0.dev0-py3-none-any.whl",
             "nox -s verify -- --target trl --trl 'git+https://github.com/ME/trl@my-fix'",
             "pip install --no-deps --target .nox/tests/trl-1.16.0 trl==1.16.0", "pip install --dry-run trl==1.16.0",
             "pip install trl==1.16.0"),  # fmt: skip
    *not_run(INSTALL, "nox -s install_check", "pip install '/path/to/ppo-stats-harness[gate]'",
             "pip install 'ppo-stats-harness[gate] @ git+https://github.com/OWNER/ppo-stats-harness'",
             "pip install 'ppo_stats_harness-0.6.0-py3-none-any.whl[gate]'", "pip install -e '.[test,trl,mutation]'",
             "pip install -e '.[gate]' -e 'examples/external_grpo[test]'", "pip install -e '.[gate]'",
             "pip install -e '.[trl]' -c constraints.txt", "pip install 'ppo-stats-harness[trl-ppo]'",
             "pip install /path/to/ppo-stats-harness"),  # fmt: skip
    *not_run("ruff in a venv of its own (the network); CI's lint", "nox -s lint"),
    *not_run("a venv of its own with verl 0.9.1 and ray (about 2 GB from the registry) and its whole gate; the "
             "target's registration, refusals and one-line exit 2 run in the suite "
             "(tests/harness/algorithms/grpo/targets/test_verl_target.py), its verdict where verl is installed",
             "nox -s verl", "nox -s verl -- --check extremes"),
    *not_run("a venv of its own with OpenRLHF 0.11.2 (--no-deps), DeepSpeed and ray (about 1.2 GB from the "
             "registry) and its whole gate; the target's registration, refusals, placeholders and one-line exit 2 run "
             "in the suite (tests/harness/algorithms/grpo/targets/test_openrlhf_target.py), its verdict where openrlhf "
             "is installed", "nox -s openrlhf", "nox -s openrlhf -- --check extremes",
             "nox -s openrlhf -- --set beta=0 --check \"logp_gradient[loss_type=grpo]\""),
    *not_run("copies TRL 1.12.0's trainer into a scratch folder for a reader's own patch; "
             "tests/harness/algorithms/ppo/targets/test_trl_module_target.py runs the same on its own copy",
             "mkdir -p scratch/my_trl && touch scratch/my_trl/__init__.py",
             "cp \"$(python -c 'import trl, os; print(os.path.dirname(trl.__file__))')"
             "/experimental/ppo/ppo_trainer.py\" scratch/my_trl/",
             "PYTHONPATH=scratch python -m harness verify --target trl:my_trl.ppo_trainer",
             "PYTHONPATH=scratch nox -s verify -- --target trl:my_trl.ppo_trainer"),  # fmt: skip
    *not_run("prints the measurements of docs/trl-grpo.md from a TRL run (a minute of CPU); the module's tests "
             "check the same numbers",
             "python tests/harness/algorithms/grpo/targets/test_trl_grpo_target.py"),  # fmt: skip
    *not_run("a measurement of the bench's reasoning: where the gate reads gradients (its output is prose there)",
             'grep -rn "\\.grad\\b\\|local_grad" harness/algorithms'),  # fmt: skip
    *not_run(FORM, "python -m harness verify --check ID", "python -m harness verify --target NAME",
             "python -m harness verify --target pkg.module:factory", "python -m harness verify --set KEY=VALUE",
             "python -m harness verify --dtype bfloat16 --seed N --report-dir DIR", "python -m harness verify ...",
             "python -m harness checks --target ...", "python -m harness verify --target trl:my_pkg.ppo_trainer",
             "nox -s verify -- --target trl --trl 'trl==X.Y.Z'", "nox -s bench -- ...",
             "nox -s bench -- --size small|medium|large",
             "python -m mutants triage add NAME... --verdict equivalent|missing-check --why TEXT",
             "ppo-verify --target my_trainer.gate:factory",
             "ppo-verify --target my_trainer.gate:factory --baseline ppo-baseline.toml",
             "uv pip install -c constraints.txt -e .[extras]", "accelerate launch --num_processes N",
             "accelerate launch --cpu --num_processes 2", "accelerate launch --cpu --num_processes 2 train.py",
             "torchrun --nproc_per_node 2 script.py", "torchrun --nproc_per_node 2 train.py"),  # fmt: skip
    *not_run(PROSE, "python -m harness", "python -m pytest", "python -m venv --without-pip",
             "python -m torch.distributed.run", "git status", "git diff", "git apply --check", "pytest -x",
             "mutmut run"),  # fmt: skip
)


def registry() -> dict[str, Command]:
    """Each registered command by its text; a command registered twice is an error here."""
    found: dict[str, Command] = {}
    for command in COMMANDS:
        assert command.line not in found, f"tests/docs/documented.py registers {command.line!r} twice"
        found[command.line] = command
    return found


def entry(line: str) -> Command:
    found = registry().get(line)
    if found is None:
        raise KeyError(f"{line!r} is not in tests/docs/documented.py's COMMANDS")
    return found


def argv(line: str, test_file: str, **programs: list[str]) -> tuple[dict[str, str], list[str]]:
    """The documented command `line` as (its `VAR=value` assignments, its argv), for the test in `test_file` that the
    registry says runs it: `python` and `python3` are this interpreter, other programs as `programs` names them
    (`nox=[python, "-m", "nox"]`), the rest of the words as the docs have them."""
    command = entry(line)
    where = Path(test_file).resolve().relative_to(ROOT).as_posix()
    assert command.how == BY_TEST and command.test.split("::")[0] == where, (
        f"tests/docs/documented.py does not say that {where} runs {line!r} ({command.how} {command.test})"
    )
    return split(line, **programs)


def split(line: str, **programs: list[str]) -> tuple[dict[str, str], list[str]]:
    """A command line as (its `VAR=value` assignments, its argv): `python` and `python3` are this interpreter,
    other programs as `programs` names them, the rest of the words as the shell reads them."""
    words = shlex.split(line)
    env = {}
    while re.fullmatch(ASSIGNMENT, words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    programs = {"python": [sys.executable], "python3": [sys.executable], **programs}
    return env, [*programs.get(words[0], [words[0]]), *words[1:]]


def normalise(text: str) -> str:
    """A command as the registry keys it: no prompt, no trailing comment, one space between words."""
    text = re.sub(r"^\$\s+", "", text.strip())
    text = strip_comment(text)
    return " ".join(text.split())


def strip_comment(text: str) -> str:
    """`text` without a ` # comment` outside quotes."""
    quote = None
    for i, c in enumerate(text):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and i > 0 and text[i - 1].isspace():
            return text[:i].rstrip()
    return text


def is_command(text: str) -> bool:
    return bool(COMMAND.match(text))


def split_blocks(text: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(lines of shell blocks, lines of prose) of a Markdown text, each with its 1-based line number."""
    lines = text.split("\n")
    shell: list[tuple[int, str]] = []
    prose: list[tuple[int, str]] = []
    fence: str | None = None
    after_blank = True
    i = 0
    while i < len(lines):
        line = lines[i]
        opened = re.match(r"^\s*```\s*([\w-]*)", line)
        if fence is None and opened:
            fence = opened.group(1)
        elif fence is not None:
            if re.match(r"^\s*```\s*$", line):
                fence = None
            elif fence in SHELL_FENCES:
                shell.append((i + 1, line))
        elif line.startswith("    ") and after_blank:
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                shell.append((i + 1, lines[i]))
                i += 1
            continue
        else:
            prose.append((i + 1, line))
            after_blank = not line.strip()
        i += 1
    return shell, prose


def joined(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Lines continued with a trailing backslash joined into one, at the first one's number."""
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, line in lines:
        if pending is not None:
            number, line = pending[0], pending[1] + " " + line.strip()
        if line.rstrip().endswith("\\"):
            pending = (number, line.rstrip()[:-1])
            continue
        pending = None
        out.append((number, line))
    return out


def commands_in(path: Path) -> list[tuple[str, int]]:
    """(normalised command, line number) of every command `path` shows."""
    shell, prose = split_blocks(path.read_text(encoding="utf-8"))
    found = [(normalise(line), n) for n, line in joined(shell) if is_command(normalise(line))]
    text = "\n".join(line for _, line in prose)
    starts = [n for n, _ in prose]
    for span in re.finditer(r"(?<!`)`([^`]+)`(?!`)", text):
        command = normalise(span.group(1))
        if is_command(command) and len(command.split()) > 1:
            found.append((command, starts[text.count("\n", 0, span.start())]))
    return found


def documented() -> dict[str, list[str]]:
    """Every documented command -> where the docs show it (`file:line`)."""
    found: dict[str, list[str]] = {}
    for path in DOCS:
        for command, number in commands_in(path):
            found.setdefault(command, []).append(f"{path.relative_to(ROOT).as_posix()}:{number}")
    return found
