"""`python -m harness.live --target trl-grpo | reference-grpo` (harness/live/targets/demo.py)."""

import importlib
import sys

from harness import needs

demo = importlib.import_module("harness.live.targets.demo")  # a target module, loaded by name
sys.exit(needs.guarded("python -m harness.live", demo.main))
