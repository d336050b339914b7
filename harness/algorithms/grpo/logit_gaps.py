"""The logit gaps a GRPO target keeps per micro-batch of its loss: `harness.instrument.logits`, under the name
targets have imported it by (`LossRecorder` computes them for the built-in targets)."""

from harness.instrument.logits import ROWS, LogitGaps, entropy_f64, logps_f64

__all__ = ["ROWS", "LogitGaps", "entropy_f64", "logps_f64"]
