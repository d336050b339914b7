"""`python -m harness verify`: run the verify suite against a target. Exit 0 pass, 1 a check failed, 2 usage."""

from __future__ import annotations

import argparse
import sys

SUITE = "harness.suite"


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="python -m harness", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    verify = sub.add_parser("verify", help="run every scenario against a target")
    verify.add_argument("--target", default="reference", help="reference (default), trl, or package.module:factory")
    verify.add_argument("--seed", type=int, default=0)
    verify.add_argument("--device", default="cpu")
    verify.add_argument("--dtype", default="float32", choices=["float32", "float64", "bfloat16"])
    verify.add_argument("--report-dir", default="reports")
    dist = sub.add_parser("verify-dist", help="uneven_split, lr0_ratio and freshness on several processes")
    dist.add_argument("--target", default="reference")
    dist.add_argument("--processes", type=int, default=2)
    dist.add_argument("--seed", type=int, default=0)
    dist.add_argument("--timeout", type=float, default=300.0)
    dist.add_argument("--report-dir", default="reports")
    return parser.parse_known_args(argv)


def pytest_exit_code(code: int) -> int:
    """pytest's codes mapped to ours: 0 pass, 1 a check failed, everything else a usage/config error."""
    return code if code in (0, 1) else 2


def plugin_args() -> list[str]:
    """Load the plugin by hand only where the package's pytest11 entry point is not installed."""
    from importlib.metadata import entry_points

    installed = any(ep.value == "harness.plugin" for ep in entry_points(group="pytest11"))
    return [] if installed else ["-p", "harness.plugin"]


def verify(args: argparse.Namespace, extra: list[str]) -> int:
    import pytest

    from .errors import HarnessConfigError
    from .targets import resolve

    try:
        resolve(args.target)
    except HarnessConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print(f"error: --device {args.device} but torch {torch.__version__} sees no CUDA device", file=sys.stderr)
            return 2
    pytest_args = [
        "--pyargs",
        SUITE,
        *plugin_args(),
        f"--ppo-target={args.target}",
        f"--ppo-seed={args.seed}",
        f"--ppo-device={args.device}",
        f"--ppo-dtype={args.dtype}",
        f"--ppo-report-dir={args.report_dir}",
        f"--junitxml={args.report_dir}/verify.xml",
        "-o",
        "junit_suite_name=ppo-verify",
        "-q",
        # the CLI imported harness before pytest could rewrite its asserts; the suite does not rely on that
        "-W",
        "ignore::pytest.PytestAssertRewriteWarning",
        *extra,
    ]
    return pytest_exit_code(pytest.main(pytest_args))


def main(argv: list[str] | None = None) -> int:
    args, extra = parse(sys.argv[1:] if argv is None else argv)
    if args.command == "verify":
        return verify(args, extra)
    from .dist import verify_dist

    return verify_dist(args, extra)


if __name__ == "__main__":
    sys.exit(main())
