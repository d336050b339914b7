"""`python -m harness verify | verify-dist | checks | algorithms`.

Exit 0 pass, 1 a check failed, 2 usage or configuration (a module the command needs that cannot be imported is
one line naming what to install, harness/needs.py).
"""

from __future__ import annotations

import argparse
import sys

from . import needs


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="python -m harness", description=__doc__)
    parser.add_argument("--version", action=VersionAction,
                        help="print the package's version and each algorithm's contract version, then exit")
    sub = parser.add_subparsers(dest="command", required=True)
    verify = sub.add_parser("verify", help="run every scenario against a target")
    verify.add_argument("--target", default="reference",
                        help="reference (default), trl, reference-grpo, trl-grpo, or pkg.module:factory")  # fmt: skip
    verify.add_argument("--seed", type=int, default=0,
                        help="the seed of every run (models, prompts, sampling; default 0): the same seed gives the "
                        "same verdicts and numbers")  # fmt: skip
    verify.add_argument("--seeds", default=None, metavar="LIST",
                        help="one run per seed, e.g. 0,1,2 or 0-4: a verdict each and one overall")  # fmt: skip
    verify.add_argument("--device", default="cpu",
                        help="where the target trains: cpu (default) or cuda (float32 with TF32 off)")  # fmt: skip
    verify.add_argument("--dtype", default="float32", choices=["float32", "float64", "bfloat16", "float16"],
                        help="the dtype the target trains in (default float32; trl-grpo trains bfloat16 and "
                        "float16 under TRL's own mixed precision); each pooled statistic's tolerance is derived "
                        "from the dtype its recorded terms were held in (docs/tolerances.md)")
    verify.add_argument("--report-dir", default="reports",
                        help="where verify.json, verify.xml and verify.md go (default reports/)")  # fmt: skip
    verify.add_argument("--check", action="append", default=[], metavar="ID",
                        help="run only this check (repeatable), e.g. 'uneven_split[epochs=1]'")  # fmt: skip
    verify.add_argument("-k", default=None, metavar="EXPRESSION", dest="keyword",
                        help="run only the checks whose ids the expression selects: words joined by and, or, not "
                        "and parentheses, each matching the ids that contain it, e.g. -k 'uneven and not epochs=2'")
    verify.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="settings",
                        help="a trainer setting for the whole gate (repeatable), e.g. temperature=0.7")  # fmt: skip
    verify.add_argument("-v", "--verbose", action="store_true",
                        help="print every metric of every check (default: one line per check)")  # fmt: skip
    verify.add_argument("--baseline", default=None, metavar="FILE",
                        help="known failures (TOML: [[known]] check, reason, link, [known.metrics] each failing "
                             "metric's diagnoses): a listed check that fails as pinned is reported as known and does "
                             "not fail the run; a new failure fails it, and so does a listed check that fails "
                             "otherwise (another metric, another diagnosis or none, a raise not pinned) or passes (a "
                             "fix, or a change in how the trainer runs it)")  # fmt: skip
    verify.add_argument("--write-baseline", default=None, metavar="FILE",
                        help="write the run's failed checks to FILE as a baseline (a known failure keeps its "
                             "entry); the exit code is the run's")  # fmt: skip
    dist = sub.add_parser("verify-dist", help="uneven_split, lr0_ratio and freshness on several processes")
    dist.add_argument("--target", default="reference",
                      help="the trainer every rank runs, named as verify's --target (default reference)")
    dist.add_argument("--processes", type=int, default=2, help="how many ranks (CPU processes, gloo; default 2)")
    dist.add_argument("--seed", type=int, default=0,
                      help="the seed of every run (default 0): the same seed gives the same verdicts and numbers")
    dist.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                      help="a run that outlives it is killed with its whole process tree and fails (default 300)")
    dist.add_argument("--report-dir", default="reports",
                      help="the reports go to REPORT_DIR/dist/: verify.json and verify.md (default reports/)")
    dist.add_argument("--launch", choices=("fork", "torchrun"), default=None,
                      help="how the ranks start: forked from this process once it has imported the target (the "
                           "default where the system can fork), or as fresh interpreters by torch.distributed.run "
                           "(the default elsewhere)")  # fmt: skip
    dist.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="settings",
                      help="a trainer setting of every rank's runs (repeatable), as verify's --set; a run that sets "
                           "the key itself keeps its own")  # fmt: skip
    checks = sub.add_parser("checks", help="list the check ids of a target's algorithm (for --check)")
    checks.add_argument("--target", default="reference",
                        help="the target whose algorithm's checks are listed (default reference: the PPO gate)")
    checks.add_argument("--markdown", action="store_true", help="a Markdown table with each scenario's summary")
    sub.add_parser("algorithms", help="list the registered algorithms and each one's default target")
    return parser.parse_known_args(argv)


class VersionAction(argparse.Action):
    """`--version`: the lines of harness/version.py, printed when the option is met (no command is needed)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from .version import version_lines

        print("\n".join(version_lines()))
        parser.exit()


def list_algorithms() -> int:
    """Print `NAME DEFAULT_TARGET` for every registered algorithm, the default first."""
    from .algorithms import get, known_algorithms
    from .errors import HarnessConfigError

    try:
        rows = [(name, get(name).default_target) for name in known_algorithms()]
    except HarnessConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(f"{name} {target}" for name, target in rows))
    return 0


def list_checks(args: argparse.Namespace) -> int:
    """Print every check id of the target's algorithm, one per line (or as docs/checks.md's table)."""
    from .algorithms import cases
    from .errors import HarnessConfigError
    from .targets import resolve

    try:
        algorithm = resolve(args.target).algorithm
        every = cases(algorithm)
    except HarnessConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not args.markdown:
        print("\n".join(str(c.id) for c in every))
        return 0
    print(f"# The checks of the {algorithm} gate\n")
    print("Generated by `python -m harness checks --markdown`; a test keeps it in step with the code.\n")
    print("| check id | scenario | what it checks |\n|---|---|---|")
    for c in every:
        print(f"| `{c.id}` | {c.scenario.name} | {c.scenario.summary} |")
    return 0


def parse_seeds(text: str) -> list[int]:
    """`0,1,2` or `0-4` (or a mix, `0-2,7`) -> the seeds, in order, each once; ValueError otherwise."""
    seeds: list[int] = []
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        numbers = range(int(first), int(last) + 1) if dash else [int(first)]
        seeds += [n for n in numbers if n not in seeds]
    if not seeds:
        raise ValueError("no seed")
    return seeds


def without_options(argv: list[str], names: tuple[str, ...]) -> list[str]:
    """`argv` less the options `names` and their values (`--name value` or `--name=value`)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in names:
            skip = True
        elif not arg.startswith(tuple(f"{n}=" for n in names)):
            out.append(arg)
    return out


def verify_seeds(args: argparse.Namespace, argv: list[str]) -> int:
    """The gate once per seed, each a process of its own with its own reports under DIR/seed-N; one overall verdict.

    Each seed's process is a child forked from this one, which imports torch, transformers and accelerate once for
    every seed (what verify-dist's forked ranks import first, harness/dist_launch.py), and runs
    `python -m harness verify ... --seed N` as a fresh interpreter would; where this process cannot fork (no fork
    on the system, a thread running: `dist_launch.fork_refused`), each seed is a fresh `python -m harness`.
    Exit 2 if any seed's run was a usage error, else 1 if any seed failed a check, else 0.
    """
    import json
    import subprocess
    from pathlib import Path

    from .dist_launch import fork_refused

    try:
        seeds = parse_seeds(args.seeds)
    except ValueError as exc:
        print(f"error: --seeds {args.seeds!r}: expected e.g. 0,1,2 or 0-4 ({exc})", file=sys.stderr)
        return 2
    if args.write_baseline is not None:
        print("error: --write-baseline writes one run's failures: run it without --seeds", file=sys.stderr)
        return 2
    rest = without_options(argv, ("--seeds", "--seed", "--report-dir"))
    codes: dict[int, int] = {}
    refused = fork_refused()
    if refused:
        print(f"verify --seeds: each seed runs as a fresh process: {refused}", file=sys.stderr)
    for seed in seeds:
        report_dir = Path(args.report_dir) / f"seed-{seed}"
        one = [*rest, "--seed", str(seed), "--report-dir", str(report_dir)]
        code = subprocess.call([sys.executable, "-m", "harness", *one]) if refused else forked_seed(one)
        codes[seed] = code if code in (0, 1) else 2
        print(f"seed {seed}: {VERDICT[codes[seed]]}", flush=True)
    overall = 2 if 2 in codes.values() else (1 if 1 in codes.values() else 0)
    summary = {"seeds": {str(s): VERDICT[c] for s, c in codes.items()}, "status": VERDICT[overall]}
    Path(args.report_dir).mkdir(parents=True, exist_ok=True)
    (Path(args.report_dir) / "verify-seeds.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    each = ", ".join(f"{s}: {VERDICT[c]}" for s, c in codes.items())
    print(f"seeds {','.join(map(str, seeds))}: {VERDICT[overall].upper()} ({each})")
    return overall


def forked_seed(argv: list[str]) -> int:
    """`python -m harness ARGV` in a child forked from this process; its exit code (negative: killed by a signal)."""
    import multiprocessing

    sys.stdout.flush()  # what this process buffered is its own to write, not the child's
    sys.stderr.flush()
    child = multiprocessing.get_context("fork").Process(target=_seed_child, args=(argv,), name="seed")
    child.start()
    child.join()
    return child.exitcode


def _seed_child(argv: list[str]) -> None:
    """The forked child's run: sys.argv as `python -m harness ARGV` has it, the exit code its `main`'s."""
    sys.argv = [sys.argv[0], *argv]
    code = main(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)


VERDICT = {0: "pass", 1: "fail", 2: "error"}


def main(argv: list[str] | None = None) -> int:
    """`python -m harness ...`; a module it needs that cannot be imported is one line and exit 2 (needs.guarded)."""
    argv = sys.argv[1:] if argv is None else argv
    verb = next((a for a in argv if not a.startswith("-")), "")
    return needs.guarded(f"python -m harness {verb}".rstrip(), lambda: run(argv))


def run(argv: list[str]) -> int:
    from .heap import no_teardown_walk

    no_teardown_walk()  # a gate process's teardown would walk torch's and transformers' objects (harness/heap.py)
    args, extra = parse(argv)
    # what a command will import, checked before it starts (one line naming it, from `main`): every target trains
    # with torch; Hypothesis draws the PPO gate's partitions (the `gate` extra)
    needs.require(*{"verify": ("torch", "hypothesis"), "verify-dist": ("torch",), "checks": ("torch",)}
                  .get(args.command, ()))  # fmt: skip
    if args.command == "verify" and args.seeds is not None:
        return verify_seeds(args, list(argv))
    if args.command == "verify":
        from .verify_command import verify

        return verify(args, extra)
    if args.command == "checks":
        return list_checks(args)
    if args.command == "algorithms":
        return list_algorithms()
    from .dist import verify_dist

    return verify_dist(args, extra)


def verify_main(argv: list[str] | None = None) -> int:
    """`ppo-verify [options]`: the same as `python -m harness verify [options]`."""
    argv = ["verify", *(sys.argv[1:] if argv is None else argv)]
    return needs.guarded("ppo-verify", lambda: run(argv))


if __name__ == "__main__":
    sys.exit(main())
