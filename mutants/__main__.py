"""`python -m mutants [curated|mutmut|report|triage|all]`: exit 0 pass, 1 a mutant got past or an error, 2 usage.

curated [--only ID ...] [--full] [--jobs N]   the catalogue against the verify suite
        [--no-fork]                            ... each gate a fresh process (default on Linux: forked)
mutmut [--max-children N] [--keep-scratch]    mutmut over ppo.py, ppo_config.py, common.py (scratch copy)
       [--algorithm grpo]                      ... over grpo.py, grpo_config.py, common.py, the GRPO gate as tests
       [--functions F,C.M]                     ... over these functions' mutants only
       [--recheck-triaged]                     ... also those triaged (skipped by default)
report [--update-baseline] [--no-install]     reports/mutation.{md,json,html} from what ran
triage [list]                                  untriaged survivors and stale entries of the last mutmut run
triage add NAME... --verdict V --why TEXT      triage mutants of the last run, keyed by what they are
triage refresh [--drop-stale]                  rewrite the entries in the current format (mutants/triage.py)
all (the default)                              curated, then mutmut, then report

A module a sub-command needs that cannot be imported (torch, pytest, Hypothesis, mutmut) is one line naming what
to install, and exit 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import needs

from .mutmut_algorithms import ALGORITHMS, DEFAULT
from .project import ROOT


def algorithm_choices() -> str:
    """Each algorithm mutmut runs over, its mutated files and its target (the registry's, never typed here)."""
    return " or ".join(
        f"{a.name} ({', '.join(Path(f).name for f in a.files)}; target {a.target}"
        f"{'; the default' if a.name == DEFAULT else ''})"
        for a in ALGORITHMS.values()
    )


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line, `all` when no sub-command is named (so that plain `python -m mutants` runs everything)."""
    parser = argparse.ArgumentParser(
        prog="python -m mutants", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--report-dir", type=Path, default=ROOT / "reports", help="where the reports go (default: reports/)"
    )

    def curated_args(p):
        """The curated runner's options, shared by `curated` and `all`."""
        p.add_argument("--only", nargs="+", metavar="ID", help="run only these catalogue ids")
        p.add_argument("--full", action="store_true", help="run the full verify suite for every mutant (kill matrix)")
        p.add_argument("--jobs", type=int, default=None, help="mutants verified at once (default: CPUs, at most 4)")
        p.add_argument("--timeout", type=float, default=900.0, help="seconds per verify run")
        p.add_argument("--keep", type=Path, default=None, help="copy each mutant's scratch folder here")
        p.add_argument(
            "--no-fork",
            action="store_true",
            help="run every gate as a fresh `python -m harness` process (slower; by default on Linux each run, "
            "verify or verify-dist, is forked from one process that imported torch, transformers, accelerate and "
            "the harness once)",
        )

    def mutmut_args(p):
        """The mutmut driver's options, shared by `mutmut` and `all`."""
        p.add_argument("--max-children", type=int, default=None, help="mutmut workers (default: CPUs)")
        p.add_argument("--mutmut-timeout", type=float, default=3600.0, help="seconds for the whole mutmut run")
        p.add_argument("--keep-scratch", action="store_true", help="keep mutmut's scratch project")
        p.add_argument(
            "--algorithm",
            choices=sorted(ALGORITHMS),
            default=DEFAULT,
            help=f"whose trainer mutmut mutates: {algorithm_choices()}",
        )
        p.add_argument(
            "--functions",
            default=None,
            metavar="F,C.M",
            help="test only the mutants of these functions (comma-separated, `name` or `Class.method`); "
            "the results and the report then cover only them",
        )
        p.add_argument(
            "--recheck-triaged",
            action="store_true",
            help="also run the mutants the triage file lists (equivalent or missing-check; skipped by default): "
            "after adding a check, to find the entries it makes stale",
        )

    def report_args(p):
        """The report's options, shared by every sub-command that writes the reports."""
        p.add_argument(
            "--update-baseline", action="store_true", help="record this run's mutmut score in mutants/baseline.json"
        )
        p.add_argument(
            "--no-install", action="store_true", help="do not npm-install the web component when it is not cached"
        )

    curated_args(sub.add_parser("curated", parents=[common], help="the curated catalogue against the verify suite"))
    mutmut = sub.add_parser("mutmut", parents=[common], help="mutmut over the whole trainer, then the reports")
    mutmut_args(mutmut)
    report_args(mutmut)
    report_args(sub.add_parser("report", parents=[common], help="write the reports from what ran"))
    everything = sub.add_parser("all", parents=[common], help="curated, mutmut and the reports (the default)")
    curated_args(everything)
    mutmut_args(everything)
    report_args(everything)
    sub.add_parser("triage", add_help=False, help="the triage file against the last mutmut run (see mutants/triage.py)")
    if not argv or argv[0] not in ("curated", "mutmut", "report", "triage", "all", "-h", "--help"):
        argv = ["all", *argv]
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the sub-command; the session exits with the worst of its parts' codes (2, then 1, then 0). A module it
    needs that cannot be imported is one line naming what to install, and exit 2 (harness/needs.py)."""
    argv = sys.argv[1:] if argv is None else argv
    verb = argv[0] if argv and not argv[0].startswith("-") else "all"
    return needs.guarded(f"python -m mutants {verb}", lambda: run(argv))


def run(argv: list[str]) -> int:
    """`main`, unguarded."""
    if argv and argv[0] == "triage":
        from . import triage

        return triage.main(argv[1:])
    args = parse(argv)
    # every sub-command imports the gate (torch; Hypothesis, the `gate` extra), and mutmut's runs mutmut, which runs
    # the verify suite under pytest: checked before a run starts, so that a missing one is one line (from `main`) and
    # not a failure of each mutant
    mutmut = ("pytest", "mutmut") if args.command in ("mutmut", "all") else ()
    needs.require("torch", "hypothesis", *mutmut)
    from . import mutmut_run, report, runner, selection  # after parsing: `--help` and a usage error import none of them

    codes = []
    if args.command in ("curated", "all"):
        codes.append(
            runner.run_curated(
                args.only, args.full, args.jobs, args.timeout, args.report_dir, args.keep, fork=not args.no_fork
            )
        )
    if args.command in ("mutmut", "all"):
        functions = selection.parse_functions(args.functions)
        codes.append(
            mutmut_run.run(
                args.max_children,
                args.mutmut_timeout,
                args.report_dir,
                args.keep_scratch,
                functions,
                algorithm=args.algorithm,
                recheck=args.recheck_triaged,
            )
        )
    if args.command in ("mutmut", "report", "all") and 2 not in codes:
        codes.append(
            report.write_reports(
                args.report_dir,
                install_elements=not getattr(args, "no_install", False),
                update_baseline=getattr(args, "update_baseline", False),
            )
        )
    if 2 in codes:
        return 2
    return 1 if any(codes) else 0


if __name__ == "__main__":
    sys.exit(main())
