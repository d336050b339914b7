"""`python -m harness.live --target trl-grpo | reference-grpo` (harness/live/targets/demo.py)."""

import sys

from harness import needs


def main() -> int:
    from harness.live.targets.demo import main  # inside the guard: what it cannot import is said in one line

    return main()


sys.exit(needs.guarded("python -m harness.live", main))
