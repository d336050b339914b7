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
VERL_KEEPS = ("transformers", "tokenizers", "accelerate")
"""constraints.txt pins that verl 0.9.1's own pins overrule (transformers below 5.11, and what it brings)."""
OPENRLHF = "0.11.2"
"""The OpenRLHF release `--target openrlhf` runs (installed with --no-deps: its flash-attn builds only with CUDA)."""
OPENRLHF_KEEPS = ("transformers", "tokenizers", "accelerate")
"""constraints.txt pins that OpenRLHF 0.11.2's own pins overrule (transformers 5.15.0, and what it brings)."""
OVERRULED = {"verl": VERL_KEEPS, "openrlhf": OPENRLHF_KEEPS}
OPENRLHF_OPS = ("from deepspeed.accelerator import get_accelerator\n"
                "for name in ('FusedAdamBuilder', 'ShareMemCommBuilder'):\n"
                "    get_accelerator().create_op_builder(name).load()")
"""DeepSpeed's CPU operations OpenRLHF's update loads (the AdamW its config asks for, the CPU collectives), built."""
"""An extra -> the constraints.txt pins its own pins overrule: an install with it leaves them out."""


def install(session: nox.Session, *extras: str, unpinned: tuple[str, ...] = ()) -> None:
    """Install the project with extras under constraints.txt (torch pinned there), then print the stack.
    `unpinned`: packages whose constraints.txt pin an extra's own pins overrule (`OVERRULED`), left out of it.

    With uv (`pip install 'nox[uv]'`, as the README's lines do) uv installs into the session's venv, which keeps
    its pip; without it, pip. No bytecode is compiled at install: the session's commands write the .pyc of what
    they import (docs/development.md, "The install")."""
    spec = f".[{','.join(extras)}]" if extras else "."
    constraints = constraints_without(session, unpinned) if unpinned else CONSTRAINTS
    uv = uv_binary()
    if uv:
        python = os.path.join(session.bin, "python")
        session.run_install(uv, "pip", "install", "--quiet", "--python", python, *uv_find_links(), "-c", constraints,
                            "-e", spec, external=True)  # fmt: skip
    else:
        session.install("-c", constraints, "--upgrade", "pip", silent=True)
        session.install("-c", constraints, "--no-compile", "-e", spec)
    session.env.update(WRITE_BYTECODE)
    session.run(
        "python",
        "-c",
        "import sys, torch; print('python', sys.version.split()[0], '| torch', torch.__version__,"
        " '| cuda', torch.cuda.is_available())",
    )


def constraints_without(session: nox.Session, names: tuple[str, ...]) -> str:
    """constraints.txt less the pins of `names`, written to the session's tmp folder; its path."""
    pins = [line for line in open(CONSTRAINTS, encoding="utf-8")
            if not re.match(rf"\s*({'|'.join(map(re.escape, names))})\s*[=<>!~]", line)]  # fmt: skip
    path = os.path.join(session.create_tmp(), "constraints-less.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(pins)
    return path


WRITE_BYTECODE = {"PYTHONDONTWRITEBYTECODE": ""}
"""For a session's commands: each module's .pyc written the first time a command imports it (an empty value is
off), whatever the caller's environment says, so that no process compiles the stack again."""


def uv_binary() -> str | None:
    """uv's executable: the one installed beside nox (`pip install 'nox[uv]'`), else one on PATH; None without
    uv (pip then does the installs)."""
    try:
        import uv
    except ImportError:
        return shutil.which("uv")
    try:
        return uv.find_uv_bin()
    except FileNotFoundError:
        return shutil.which("uv")


def uv_find_links() -> list[str]:
    """`--find-links` for each of pip's configured find-links (its config files and PIP_FIND_LINKS): uv reads no
    pip configuration, and a CPU build of torch that pip would take from such a folder must be the one uv takes."""
    try:
        listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                                timeout=60).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return []
    found: list[str] = []
    for line in listed.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.endswith(".find-links"):
            found += [link for link in value.strip().strip("'\"").split() if link not in found]
    return [arg for link in found for arg in ("--find-links", link)]


def harness_code(session: nox.Session, *args: str, env: dict | None = None) -> int:
    """Run a harness command in the session; its exit code (0 pass, 1 fail, 2 usage)."""
    python = os.path.join(session.bin, "python")
    session.log(" ".join(["python", *args]))
    return subprocess.call([python, *args], env={**os.environ, **CPU_THREADS, **WRITE_BYTECODE, **(env or {})})


def exit_with(session: nox.Session, code: int) -> None:
    """End the session with the harness's own exit code when it is not 0."""
    if code:
        session.log(f"exit code {code}")
        raise SystemExit(code)


def run_exit_code(session: nox.Session, *args: str, env: dict | None = None) -> None:
    """Run a harness command and make the session exit with its own code (0 pass, 1 fail, 2 usage)."""
    exit_with(session, harness_code(session, *args, env=env))


def worst(codes: list[int]) -> int:
    """One exit code for several runs: 2 if any was a usage error (or another failure), else 1 if any failed."""
    if any(c not in (0, 1) for c in codes):
        return 2
    return 1 if 1 in codes else 0


def names_target(posargs: list[str]) -> bool:
    """True when the arguments choose a target, checks or settings (each one algorithm's): then one gate runs."""
    return any(
        a in ("--target", "--check", "--set") or a.startswith(("--target=", "--check=", "--set=")) for a in posargs
    )


def report_dir(posargs: list[str]) -> tuple[str, list[str]]:
    """The `--report-dir` of the arguments (default reports), and the arguments without it."""
    found, rest, args = "reports", [], iter(posargs)
    for arg in args:
        if arg == "--report-dir":
            found = next(args, found)
        elif arg.startswith("--report-dir="):
            found = arg.partition("=")[2]
        else:
            rest.append(arg)
    return found, rest


def target_named(posargs: list[str]) -> str | None:
    """The `--target` of the arguments (`--target NAME` or `--target=NAME`), or None."""
    for k, arg in enumerate(posargs):
        if arg == "--target" and k + 1 < len(posargs):
            return posargs[k + 1]
        if arg.startswith("--target="):
            return arg.partition("=")[2]
    return None


def declared_extras(session: nox.Session, posargs: list[str]) -> list[str]:
    """The package's extras the target named in the arguments needs, as its algorithm declares them (read by the
    installed harness, `harness.targets.extras`, which loads no target): `trl-ppo` for `trl`, `trl` for
    `trl-grpo`, none for a module's own factory; [] when no target is named. The noxfile names no target."""
    target = target_named(posargs)
    if target is None:
        return []
    code = "import sys; from harness.targets import extras; print(' '.join(extras(sys.argv[1])))"
    return session.run("python", "-c", code, target, silent=True, log=False).split()


def trl_option(session: nox.Session) -> tuple[str | None, list[str]]:
    """`--trl PATH_OR_REQUIREMENT` (or `--trl=...`) taken out of the session's arguments, and the rest."""
    found, rest, args = None, [], iter(session.posargs)
    for arg in args:
        if arg == "--trl":
            found = next(args, None)
            if found is None:
                session.error("--trl needs a TRL checkout, wheel or requirement, e.g. --trl ../trl")
        elif arg.startswith("--trl="):
            found = arg.partition("=")[2]
        else:
            rest.append(arg)
    return found, rest


def extra(name: str) -> list[str]:
    """The requirements of the package's optional dependency group `name` (pyproject.toml)."""
    return list(nox.project.load_toml(os.path.join(ROOT, "pyproject.toml"))["project"]["optional-dependencies"][name])


def constraints_but_trl(folder: str) -> str:
    """constraints.txt without any trl pin, written to `folder`; its path. constraints.txt holds none (the `trl`
    and `trl-ppo` extras pin two releases); this keeps an install of a TRL of the caller's choosing from being
    refused should one come back."""
    pins = [line for line in open(CONSTRAINTS, encoding="utf-8") if not re.match(r"\s*trl\s*[=<>!~]", line)]
    constraints = os.path.join(folder, "constraints-but-trl.txt")
    with open(constraints, "w", encoding="utf-8") as f:
        f.writelines(pins)
    return constraints


def trl_besides() -> list[str]:
    """What TRL needs at run time beside itself: the `trl` extra less its TRL pin and less the gate's engine (the
    `gate` extra), i.e. `requests`, which trl.trainer.grpo_trainer imports and no TRL release declares; read
    from pyproject.toml. A live run needs this and TRL, and no pytest."""
    engine = set(extra("gate"))
    return [req for req in extra("trl") if not re.match(r"\s*trl\b", req) and req not in engine]


def trl_pin(extra_name: str) -> str:
    """The TRL release the package's extra `extra_name` pins (`trl==X`): X."""
    (pin,) = [req for req in extra(extra_name) if re.match(r"\s*trl\s*==", req)]
    return pin.partition("==")[2].strip()


def install_trl(session: nox.Session, what: str) -> None:
    """Install a TRL checkout (a folder: editable), wheel or requirement into the session, keeping torch.

    Under constraints.txt (which pins no trl: the extras pin theirs), so that torch stays 2.13.0 whatever the
    TRL asks for, and pip fails rather than fetch another torch.
    """
    constraints = constraints_but_trl(session.create_tmp())
    besides = trl_besides()
    if besides:
        session.install("-c", constraints, *besides)
    local = os.path.abspath(os.path.expanduser(what))
    if os.path.isdir(local):
        session.install("-c", constraints, "-e", local)  # edits to the checkout count without reinstalling
    else:
        session.install("-c", constraints, local if os.path.exists(local) else what)
    probe = (
        "import importlib.metadata as m, torch, trl;"
        "print('trl', m.version('trl'), 'from', trl.__path__[0], '| torch', torch.__version__)"
    )
    session.run("python", "-c", probe, env={"TRL_EXPERIMENTAL_SILENCE": "1"})


@nox.session(python=PYTHON)
def verify(session: nox.Session) -> None:
    """The gate: every scenario against a target. Without `--target`, every registered algorithm's reference
    trainer on the CPU (`python -m harness algorithms` lists them): the PPO gate (`reference`, reports in
    reports/), then the GRPO gate (`reference-grpo`, reports in reports/grpo/); the session exits 2 if any was
    a usage error, else 1 if any failed a check. `--target` or `--check` runs one gate (check ids belong to one
    algorithm; the default target is `reference`).

    A named target's declared extras are installed first (`declared_extras`): `-- --target trl` installs the
    `trl-ppo` extra (TRL 1.12.0, the PPO adapter's release), `-- --target trl-grpo` the `trl` extra (today's TRL);
    `-- --target trl --trl PATH_OR_REQUIREMENT` installs that TRL (a checkout, a wheel, a version) into the session
    instead, so that TRL's adapter runs against it.
    """
    trl, args = trl_option(session)
    install(session, "gate")  # the engine's needs: no pytest
    wanted = declared_extras(session, args) if trl is None else []
    if wanted:
        install(session, "gate", *wanted, unpinned=tuple(p for e in wanted for p in OVERRULED.get(e, ())))
    if trl is not None:
        install_trl(session, trl)
    if names_target(args):
        run_exit_code(session, "-m", "harness", "verify", *args)
        return
    reports, rest = report_dir(args)
    listed = session.run("python", "-m", "harness", "algorithms", silent=True, log=False)
    if listed is None:  # nox runs nothing: --install-only
        return
    codes, said = [], []
    for k, (name, target) in enumerate(line.split() for line in listed.strip().splitlines()):
        where = reports if k == 0 else os.path.join(reports, name)  # the default algorithm's reports at the top
        codes.append(harness_code(session, "-m", "harness", "verify", "--target", target, "--report-dir", where, *rest))
        said.append(f"{name.upper()} gate ({target}): exit {codes[-1]}")
    session.log("; ".join(said))
    exit_with(session, worst(codes))


PARALLEL = ("-n", "auto", "--dist", "loadfile", "--durations=15")
"""How `tests` runs pytest: one pytest-xdist worker per CPU, each taking whole modules (a module's fixtures are
made once; tests/conftest.py hands out the costly modules first), and the slowest tests named at the end.
`-- -n 0` runs in one process; `-- -m "not slow"` is the fast tier (docs/development.md, "The test suite's
time")."""


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The project's own test suite (trainer, harness, TRL verdicts, curated mutants, examples, several processes),
    on every CPU.

    The suite's two tests that need more than this venv run in it too, scheduled by pytest-xdist with the rest
    (so the suite never runs more CPU-bound processes than there are CPUs): the example session
    (tests/examples/test_example_session.py runs `nox -s example` with this interpreter, named in
    PPO_HARNESS_NOX), and the GRPO verdict on TRL's newest release (TRL_NEWEST_TESTS, its gate processes with that
    release first on PYTHONPATH: a folder of this venv, named in PPO_HARNESS_TRL_NEWEST; it needs nothing else
    that this venv lacks).

    `nox -Rs tests -- -m "not slow"` is the fast tier for the edit-test loop (the venv reused, nothing installed):
    every module's unit tests and each algorithm's whole reference gate, in process.
    """
    install(session, "test", "trl-ppo", "mutation")
    site = install_trl_newest(session)
    if session.run(sys.executable, "-c", "", external=True, silent=True, log=False) is None:
        return  # nox runs nothing: --install-only
    if not os.path.isdir(os.path.join(site, f"trl-{TRL_NEWEST}.dist-info")):  # -R installs nothing
        session.error(f"trl {TRL_NEWEST} is not installed in {site}: run `nox -s tests` once without -R")
    # the suite's own verify runs hold broken trainers to the gate: keep their tables out of a CI step summary
    env = {**CPU_THREADS, "GITHUB_STEP_SUMMARY": "", "PPO_HARNESS_NOX": sys.executable, "PPO_HARNESS_TRL_NEWEST": site}
    session.run("python", "-m", "pytest", "tests", *PARALLEL, *session.posargs, env=env)


def install_trl_newest(session: nox.Session) -> str:
    """TRL_NEWEST installed without its dependencies (this venv has them all: the pinned stack serves every
    release from 1.12.0 on) into a folder of the session's venv, for PYTHONPATH; the folder."""
    site = os.path.join(session.virtualenv.location, f"trl-{TRL_NEWEST}")
    if not os.path.isdir(os.path.join(site, f"trl-{TRL_NEWEST}.dist-info")):
        session.install("--quiet", "--no-deps", "--upgrade", "--target", site, f"trl=={TRL_NEWEST}")
    return site


@nox.session(python=PYTHON, default=False)
def lint(session: nox.Session) -> None:
    """ruff over the code."""
    session.install("-c", CONSTRAINTS, "ruff")
    packages = ("reference_trainers", "reference_ppo", "harness", "tests", "mutants")
    session.run("ruff", "check", *packages, "noxfile.py", *session.posargs)


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
    """Curated known-bug mutants, then mutmut over the whole trainer; writes reports/mutation.*."""
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


EXAMPLES = (
    # (folder under examples/, its package, its target, its broken variant, its reports under reports/example/)
    ("external_trainer", "tinyppo", "tinyppo.target:factory", "tinyppo.broken:factory", ""),
    ("external_grpo", "tinygrpo", "tinygrpo.target:factory", "tinygrpo.broken:factory", "grpo"),
)
"""The example projects `example` holds to the gate: a PPO trainer, then a GRPO one."""


@nox.session(python=False, default=False)
def example(session: nox.Session) -> None:
    """examples/external_trainer (tinyppo, PPO) and examples/external_grpo (tinygrpo, GRPO) as trainer repositories
    use the gate, in one fresh venv with this package's wheel.

    Builds the wheel, creates a venv, installs torch (the pin of constraints.txt), then the wheel with no extra,
    TRL's newest release and what TRL imports undeclared, as a TRL user's training environment has them: there,
    live mode must run with none of the test dependencies (`live_without_extras`). Then the wheel's `gate` extra:
    `ppo-verify` must run the gate with no pytest there (`gate_without_pytest`). Then both examples; for each
    example in turn, `ppo-verify` on its trainer must exit 0, its own tests must pass, and `ppo-verify` on its
    broken variant must exit 1. Reports: reports/example/ (tinyppo) and reports/example/grpo/ (tinygrpo).
    """
    if session.run(sys.executable, "-c", "", external=True, silent=True) is None:  # nox runs nothing: --install-only
        session.log("example makes its own venv when it runs: nothing to install ahead (--install-only)")
        return
    started = time.monotonic()
    scratch = tempfile.mkdtemp(prefix="ppo-example-")
    try:
        # from copies, so that build/ and *.egg-info stay out of the work tree
        source = shutil.copytree(
            ROOT, os.path.join(scratch, "src"), ignore=shutil.ignore_patterns(*NOT_SOURCE, "examples")
        )
        projects = [
            shutil.copytree(os.path.join(ROOT, "examples", folder), os.path.join(scratch, folder),
                            ignore=shutil.ignore_patterns(*NOT_SOURCE))
            for folder, *_ in EXAMPLES
        ]  # fmt: skip
        wheels = os.path.join(scratch, "wheels")
        session.run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", wheels, source, external=True)
        (wheel,) = [os.path.join(wheels, name) for name in os.listdir(wheels) if name.endswith(".whl")]
        session.log(f"built {os.path.basename(wheel)}")

        venv = os.path.join(scratch, "venv")
        python, bin_dir = os.path.join(venv, "bin", "python"), os.path.join(venv, "bin")
        # no bytecode compiled at install (pip compiles every file of torch and transformers, some 40 s of CPU):
        # the commands below write the .pyc of what they import, once (PYTHONDONTWRITEBYTECODE emptied for them)
        uv = uv_binary()
        if uv:  # a venv as `python -m venv` makes it, without the pip that uv does not need
            session.run(sys.executable, "-m", "venv", "--without-pip", venv, external=True)
            pip = (uv, "pip", "install", "--quiet", "--python", python, *uv_find_links(), "-c", CONSTRAINTS)
        else:
            session.run(sys.executable, "-m", "venv", venv, external=True)
            pip = (python, "-m", "pip", "install", "--quiet", "--no-compile", "-c", CONSTRAINTS)
            session.run(*pip, "--upgrade", "pip", external=True)
        session.run(*pip, "torch", external=True)  # the trainer's torch is there first
        # nothing from this work tree on the path (every command runs outside it): the harness comes from the wheel
        env = {**CPU_THREADS, **WRITE_BYTECODE, "PYTHONPATH": "", "GITHUB_STEP_SUMMARY": ""}
        # a TRL user's environment: the package with no extra beside TRL and what TRL imports without declaring it
        session.run(*pip, wheel, f"trl=={TRL_NEWEST}", *trl_besides(), external=True)
        with session.chdir(scratch):
            live_without_extras(session, python, os.path.join(scratch, "live"), env)
        session.run(*pip, f"{wheel}[gate]", external=True)  # what the gate's engine needs, and no pytest
        with session.chdir(scratch):
            verify = os.path.join(bin_dir, "ppo-verify")
            gate_without_pytest(session, python, verify, os.path.join(scratch, "gate"), env)
        session.run(*pip, wheel, *(f"{project}[test]" for project in projects), external=True)

        modules = ["harness", *(package for _, package, *_ in EXAMPLES)]
        files = ", ".join(f"{m}.__file__" for m in modules)
        probe = f"import torch, {', '.join(modules)}; print(torch.__version__, {files})"
        with session.chdir(scratch):
            torch_version, *found = session.run(python, "-c", probe, env=env, external=True, silent=True).split()
        session.log(" | ".join(f"{m} from {path}" for m, path in zip(modules, found)) + f" | torch {torch_version}")
        if not all(path.startswith(venv) for path in found):
            session.error(f"the examples did not import the installed packages: {found}")

        verify = os.path.join(bin_dir, "ppo-verify")
        for project, (_, package, target, broken, where) in zip(projects, EXAMPLES):
            reports = os.path.join(ROOT, "reports", "example", where)
            with session.chdir(scratch):  # no pytest configuration of this repository applies
                session.run(verify, "--target", target, "--report-dir", os.path.join(reports, "target"),
                            env={**env, "GITHUB_STEP_SUMMARY": os.environ.get("GITHUB_STEP_SUMMARY", "")},
                            external=True)  # fmt: skip
                session.log(f"the {package} trainer passes the gate (exit 0)")
            with session.chdir(project):
                session.run(python, "-m", "pytest", "-p", "no:cacheprovider", env=env, external=True)
                session.log(f"{package}'s own tests pass")
            with session.chdir(scratch):
                session.run(verify, "--target", broken, "--report-dir", os.path.join(reports, "broken"),
                            env=env, external=True, success_codes=[1])  # fmt: skip
                session.log(f"the broken {package} trainer fails the gate (exit 1), as it must")
        session.log(f"example: {time.monotonic() - started:.0f} s")
    finally:
        # a venv with torch takes minutes to delete on some disks (ext4 with discard): not waited for
        subprocess.Popen(["rm", "-rf", scratch], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip


TEST_ONLY = ("pytest", "hypothesis", "xdist", "tensorboard")
"""What the `test` extra brings that live mode must not need."""
LIVE_RUN = ("--target", "trl-grpo", "--steps", "2", "--every", "1", "--layers", "1", "--hidden-size", "16")
"""The smallest live demonstration: 2 steps of TRL's GRPOTrainer on a one-layer Llama of width 16, every log
checked (about 5 s on a CPU, most of it importing TRL)."""


def live_without_extras(session: nox.Session, python: str, reports: str, env: dict) -> None:
    """In a venv holding the package with no extra and TRL: none of TEST_ONLY is importable, and a small TRL
    GRPOTrainer run with LiveCheck added (`python -m harness.live`, LIVE_RUN) has its logs checked. It exits 1,
    as TRL's newest release does in live mode (its entropy is a mean of micro-batch means: class 16,
    docs/live.md)."""
    probe = f"import importlib.util as u; print(' '.join(m for m in {TEST_ONLY!r} if u.find_spec(m)))"
    found = session.run(python, "-c", probe, env=env, external=True, silent=True).split()
    if found:
        session.error(f"installing the package with no extra brought {', '.join(found)}: live mode must not need them")
    started = time.monotonic()
    said = session.run(python, "-m", "harness.live", *LIVE_RUN, "--report-dir", reports,
                       env={**env, "TRL_EXPERIMENTAL_SILENCE": "1"}, external=True, silent=True,
                       success_codes=[1])  # fmt: skip
    checked = re.search(r"live demo: (\d+) interval\(s\) checked, (\d+) failed", said)
    if not checked or checked[1] != "2" or "(class 16)" not in said:
        session.error(f"the live check did not check the run's 2 logs as expected:\n{said[-3000:]}")
    session.log(f"live mode with no extra: LiveCheck checked {checked[1]} logs of a TRL {TRL_NEWEST} GRPOTrainer run "
                f"({checked[2]} failed, class 16, as TRL logs entropy), without {', '.join(TEST_ONLY)}; "
                f"{time.monotonic() - started:.1f} s")  # fmt: skip


def gate_without_pytest(session: nox.Session, python: str, verify: str, reports: str, env: dict) -> None:
    """In a venv holding the package with its `gate` extra (and TRL): pytest is not importable, and `ppo-verify`
    holds the reference GRPO trainer to two checks, exit 0: the gate's engine needs no test framework."""
    probe = "import importlib.util as u; print(bool(u.find_spec('pytest')))"
    if session.run(python, "-c", probe, env=env, external=True, silent=True).strip() != "False":
        session.error("installing the package with its gate extra brought pytest: the engine must not need it")
    session.run(verify, "--target", "reference-grpo", "--check", "short_window", "--check", "extremes",
                "--report-dir", reports, env=env, external=True)  # fmt: skip
    session.log("ppo-verify ran the gate with the gate extra alone, without pytest (exit 0)")


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


TRL_NEWEST = trl_pin("trl")
"""The newest TRL release whose GRPO verdict is pinned (TRL_NEWEST_TESTS): the one the `trl` extra installs."""
TRL_NEWEST_TESTS = "tests/harness/algorithms/grpo/targets/test_trl_newest.py"
"""The module that pins it."""
TRL_RELEASES = ("1.12.0", "1.13.0", "1.14.2", "1.15.0", "1.16.0")
"""The TRL releases `trl_releases` runs the GRPO gate on by default."""


@nox.session(python=PYTHON, default=False)
def trl_newest(session: nox.Session) -> None:
    """The GRPO gate's pinned verdict on TRL's newest release (TRL_NEWEST): TRL_NEWEST_TESTS alone, in this
    session's own venv with that release installed (`tests` runs the same module from a folder of its venv)."""
    install(session, "test", "trl")
    env = {**CPU_THREADS, "GITHUB_STEP_SUMMARY": "", "TRL_EXPERIMENTAL_SILENCE": "1"}
    session.run("python", "-m", "pytest", TRL_NEWEST_TESTS, *session.posargs, env=env)


@nox.session(python=PYTHON, default=False)
def live(session: nox.Session) -> None:
    """A live-checked GRPO run on a 25M-parameter Llama built from its config (docs/live.md): `-- --target
    trl-grpo` trains TRL's newest release (TRL_NEWEST, or `--trl PATH_OR_REQUIREMENT`) and exits 1 naming class
    16; `-- --target reference-grpo` trains the reference trainer and exits 0. `--device cuda` where there is one."""
    install(session)
    trl, rest = trl_option(session)
    if trl is not None or "trl" in declared_extras(session, rest):
        install_trl(session, trl or f"trl=={TRL_NEWEST}")
    run_exit_code(session, "-m", "harness.live", *rest, env={"TRL_EXPERIMENTAL_SILENCE": "1"})


def failing_checks(report: str) -> str:
    """What a verify.json report says for `trl_releases`' table: how many checks fail and which, or the usage
    error's message ("-" without a report)."""
    if not os.path.exists(report):
        return "-"
    with open(report, encoding="utf-8") as f:
        found = json.load(f)
    if found["status"] == "error":
        return "usage error: " + "; ".join(check["message"] for check in found["checks"])
    failing = [check["id"] for check in found["checks"] if check["status"] != "pass"]
    return f"{len(failing)}: {', '.join(failing)}" if failing else "0"


@nox.session(python=False, default=False)
def trl_releases(session: nox.Session) -> None:
    """The GRPO gate (`--target trl-grpo`, CPU) on each TRL release named (`-- 1.13.0 1.16.0`; default
    TRL_RELEASES), each in a venv of its own under .nox/trl_releases/ (made once, then kept), reports in
    reports/trl-releases/RELEASE/. Prints one row per release: the release, the gate's exit code, how many checks
    fail and which, and the seconds the gate took. The session fails only when a gate did not reach a verdict or
    a usage error (an exit code other than 0, 1 or 2)."""
    releases = session.posargs or list(TRL_RELEASES)
    home = os.path.join(ROOT, ".nox", "trl_releases")
    os.makedirs(home, exist_ok=True)
    constraints = constraints_but_trl(home)
    rows, codes = [], []
    for release in releases:
        venv = os.path.join(home, release)
        python = os.path.join(venv, "bin", "python")
        if not os.path.exists(python):
            session.run(sys.executable, "-m", "venv", venv, external=True)
            pip = (python, "-m", "pip", "install", "--quiet", "-c", constraints)
            session.run(*pip, "--upgrade", "pip", external=True)
            session.run(*pip, "-e", f"{ROOT}[test]", *trl_besides(), f"trl=={release}", external=True)
        reports = os.path.join(ROOT, "reports", "trl-releases", release)
        shutil.rmtree(reports, ignore_errors=True)
        env = {**os.environ, **CPU_THREADS, "GITHUB_STEP_SUMMARY": "", "TRL_EXPERIMENTAL_SILENCE": "1"}
        session.log(f"trl {release}: python -m harness verify --target trl-grpo")
        started = time.monotonic()
        code = subprocess.call([python, "-m", "harness", "verify", "--target", "trl-grpo", "--report-dir", reports],
                               env=env)  # fmt: skip
        seconds = time.monotonic() - started
        listed = failing_checks(os.path.join(reports, "verify.json"))
        rows.append(f"| {release} | {code} | {listed} | {seconds:.0f} |")
        codes.append(code)
    print("\n".join(["| TRL | exit | failing checks | seconds |", "|---|---|---|---|", *rows]), flush=True)
    if any(code not in (0, 1, 2) for code in codes):
        session.error(f"a gate did not reach a verdict: exit codes {codes}")




@nox.session(python=PYTHON, default=False)
def verl(session: nox.Session) -> None:
    """verl 0.9.1's GRPO update under the gate on the CPU (`--target verl`, docs/verl.md), in a venv of its own:
    the package with its `verl` extra (and the `test` extra, so that the test pinning verl's verdict,
    tests/harness/algorithms/grpo/targets/test_verl_target.py, runs there), under constraints.txt less the pins
    verl's own overrule (`VERL_KEEPS`), so
    that torch stays 2.13.0 and transformers is verl's (below 5.11). A `kernels` that pip's downgrade of
    transformers leaves behind is not the run's concern: the target keeps transformers from one it cannot use.
    Arguments go to `python -m harness verify --target verl`; without any, the run is held to its baseline
    (baselines/verl-0.9.1-grpo.toml) and the session exits with the gate's code."""
    session.install("-c", constraints_without(session, VERL_KEEPS), "--no-compile", "-e", ".[verl,test]")
    session.env.update(WRITE_BYTECODE)
    probe = ("import importlib.metadata as m, torch; print('verl', m.version('verl'), '| transformers',"
             " m.version('transformers'), '| torch', torch.__version__)")  # fmt: skip
    session.run("python", "-c", probe)
    args = session.posargs or ["--baseline", os.path.join("baselines", "verl-0.9.1-grpo.toml")]
    run_exit_code(session, "-m", "harness", "verify", "--target", "verl", *args)


@nox.session(python=PYTHON, default=False)
def openrlhf(session: nox.Session) -> None:
    """OpenRLHF 0.11.2's GRPO actor update under the gate on the CPU (`--target openrlhf`, docs/openrlhf.md), in a
    venv of its own: the package with its `openrlhf` extra (what the actor update imports: DeepSpeed 0.19.6, OpenRLHF's
    transformers 5.15.0, ray, peft, torchdata, pylatexenc, aiohttp) and the `test` extra (the test pinning its verdict,
    tests/harness/algorithms/grpo/targets/test_openrlhf_target.py, runs there), under constraints.txt less the pins
    OpenRLHF's own overrule (`OPENRLHF_KEEPS`), so that torch stays 2.13.0; then openrlhf itself with --no-deps (its
    flash-attn 2.8.3 builds only with CUDA, its vllm is the rollout server the target does not use); then DeepSpeed's
    CPU operations (`OPENRLHF_OPS`), once per machine, so that the gate's own time is the gate's.
    Arguments go to `python -m harness verify --target openrlhf`; without any, the run is held to its baseline
    (baselines/openrlhf-0.11.2-grpo.toml) and the session exits with the gate's code."""
    session.install("-c", constraints_without(session, OPENRLHF_KEEPS), "--no-compile", "-e", ".[openrlhf,test]")
    session.install("--no-deps", "--no-compile", f"openrlhf=={OPENRLHF}")
    session.env.update(WRITE_BYTECODE)
    # DeepSpeed builds its CPU operations with the C++ compiler at first use (about 4 minutes on 2 cores), kept in
    # torch's extension cache: built here, at install (--install-only too), through DeepSpeed's accelerator, in the
    # environment the gate runs in (harness_code's: a build under another one is built again), so the gate never does
    session.log("building DeepSpeed's CPU operations (once; torch's extension cache keeps them)")
    python = os.path.join(session.bin, "python")
    if subprocess.call([python, "-c", OPENRLHF_OPS], env={**os.environ, **CPU_THREADS, "DS_ACCELERATOR": "cpu"}):
        session.error("DeepSpeed's CPU operations did not build")
    probe = ("import importlib.metadata as m, torch; print('openrlhf', m.version('openrlhf'), '| deepspeed',"
             " m.version('deepspeed'), '| transformers', m.version('transformers'), '| torch', torch.__version__)")
    if session.run("python", "-c", probe) is None:  # nox runs nothing: --install-only
        return
    args = session.posargs or ["--baseline", os.path.join("baselines", f"openrlhf-{OPENRLHF}-grpo.toml")]
    run_exit_code(session, "-m", "harness", "verify", "--target", "openrlhf", *args)
