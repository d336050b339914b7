"""tinygrpo: a small GRPO trainer for causal language models (trainer.py), and its target for the gate (target.py).

The trainer itself needs only torch and transformers; the harness is imported by target.py and
broken.py alone.
"""
