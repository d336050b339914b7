"""The PPO contract's version (harness/contract.py): unchanged since release 0.1.0.

Light at import (no torch): `python -m harness --version` reads it.
"""

from __future__ import annotations

from harness.contract import Contract

CONTRACT = Contract(version=1, document="docs/metrics.md")
"""PPO's contract: the version a PPO target may pin (`factory.contract_version`)."""
