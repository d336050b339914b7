"""The verify suite: one pytest test per scenario, run by `python -m harness verify`."""
