"""GRPO's live mode (docs/live.md): its adapters, which hold a trainer (`LiveCheck` for TRL's GRPOTrainer, trl.py;
`live_reference` for the reference trainer, reference.py), and the demonstration `python -m harness.live` runs for
GRPO's targets (demo.py). The check of an interval is harness/algorithms/grpo/live.py; `GRPO.live` names them all.
"""
