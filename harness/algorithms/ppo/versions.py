"""The PPO contract's version and its history (harness/contract.py): what changed since version 1, and when.

Version 1 is the contract of releases 0.1.0 to 0.3.0. Version 2 (release 0.4.0) holds each optimizer step to the
optimizer's own update (`optimizer_step`). Light at import (no torch): `python -m harness --version` reads it.
"""

from __future__ import annotations

from harness.contract import Contract, optimizer_step_change

OPTIMIZER_STEP = optimizer_step_change(version=2, release="0.4.0")

CONTRACT = Contract(version=2, document="docs/metrics.md", changes=(OPTIMIZER_STEP,))
"""PPO's contract: the version a PPO target may pin (`factory.contract_version`)."""
