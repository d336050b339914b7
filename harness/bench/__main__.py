import sys

from harness import needs


def main() -> int:
    from .cli import main  # imports the PPO scenarios (Hypothesis): inside the guard

    return main()


sys.exit(needs.guarded("python -m harness.bench", main))
