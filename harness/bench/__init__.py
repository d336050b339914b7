"""`python -m harness.bench`: the gate's speed and memory, side by side in one run (cli.py, docs/bench.md)."""
