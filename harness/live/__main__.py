"""`python -m harness.live --target trl-grpo | reference-grpo` (harness/live/targets/demo.py)."""

import importlib
import sys

sys.exit(importlib.import_module("harness.live.targets.demo").main())  # a target module, loaded by name
