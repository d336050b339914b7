"""`python -m harness.live --target NAME`: the demonstration of live mode that NAME's algorithm declares
(harness/live/demo.py)."""

import sys

from harness import needs


def main() -> int:
    from harness.live.demo import main  # inside the guard: what it cannot import is said in one line

    return main()


sys.exit(needs.guarded("python -m harness.live", main))
