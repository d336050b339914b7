"""The live check of TRL's `GRPOTrainer` (or a subclass, or a trainer module with its names): one callback.

    trainer = GRPOTrainer(model=..., args=GRPOConfig(...), ...)
    trainer.add_callback(LiveCheck(every=20))
    trainer.train()

At the start of each sampled logging interval the callback installs the gate's loss recorder on the trainer
(`harness.algorithms.grpo.targets.trl.recording`: TRL's `_compute_loss`, its one call of
`_get_per_token_logps_and_entropies`, and `_generate_and_score_completions`), which records each micro-batch's
inputs and outputs as the gate's TRL adapter does, without the float64 recompute of the logits; at the
interval's log it takes the recorder off, checks the records (every rank's) against what TRL logged, and adds
`live/<name>_expected` to the logs before any callback or tracker sees them. Outside the sampled intervals
nothing of the trainer is wrapped. The recorder's wrappers call TRL's own methods with the same arguments and
return what they return.
"""

from __future__ import annotations

import inspect
import sys
import types
from typing import Any

from transformers import TrainerCallback

from harness.algorithms.grpo.expect import Settings
from harness.algorithms.grpo.live import Geometry
from harness.algorithms.grpo.spec import GRPOSpec
from harness.errors import HarnessConfigError
from harness.instrument.loss_recorder import LossRecorder
from harness.instrument.reward_calls import RewardTap

from ..session import LiveCheckFailed, LiveSession, logger


def find_trainer(callback: Any) -> Any:
    """The transformers Trainer whose callback handler holds `callback`, found on the calling frames (the trainer's
    training loop calls `on_train_begin` through its handler)."""
    frame = inspect.currentframe()
    try:
        while frame is not None:
            owner = frame.f_locals.get("self")
            handler = getattr(owner, "callback_handler", None)
            if handler is not None and any(c is callback for c in getattr(handler, "callbacks", ())):
                return owner
            frame = frame.f_back
    finally:
        del frame
    raise HarnessConfigError("LiveCheck: no Trainer found that holds this callback: pass it, LiveCheck(trainer=...)")


def trainer_module(trainer: Any) -> tuple[types.ModuleType, Any]:
    """The trainer module of TRL's GRPO trainer that `trainer` is (or derives from), and its entry points."""
    from harness.algorithms.grpo.targets.trl import entry

    errors = []
    for cls in type(trainer).__mro__:
        module = sys.modules.get(cls.__module__)
        if module is None or not hasattr(module, "GRPOTrainer"):
            continue
        try:
            return module, entry.entry_points(module)
        except HarnessConfigError as why:
            errors.append(str(why))
    raise HarnessConfigError(errors[0] if errors else f"LiveCheck: {type(trainer).__name__} is not a GRPOTrainer")


def model_dtype(trainer: Any) -> str:
    """The dtype the tolerances are those of: bfloat16 under `bf16`, else the policy's parameters'."""
    if getattr(trainer.args, "bf16", False):
        return "bfloat16"
    model = trainer.accelerator.unwrap_model(trainer.model)
    dtype = next((p.dtype for p in model.parameters()), None)
    return str(dtype).removeprefix("torch.") if dtype is not None else "float32"


def trl_settings(trainer: Any) -> Settings:
    """The oracle's settings, as TRL's trainer resolved them (its attributes, then its `GRPOConfig`)."""
    args, defaults = trainer.args, GRPOSpec()
    epsilon_low = getattr(trainer, "epsilon_low", getattr(args, "epsilon", defaults.epsilon_low))
    epsilon_high = getattr(trainer, "epsilon_high", getattr(args, "epsilon_high", None))
    soft = {name: getattr(args, name, getattr(defaults, name)) for name in (
        "sapo_temperature_pos", "sapo_temperature_neg", "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg",
        "vespo_lambda_neg")}  # fmt: skip
    return Settings(
        loss_type=getattr(trainer, "loss_type", args.loss_type),
        beta=float(getattr(trainer, "beta", args.beta)),
        use_bias_correction_kl=bool(getattr(args, "use_bias_correction_kl", False)),
        epsilon_low=float(epsilon_low),
        epsilon_high=float(epsilon_high if epsilon_high is not None else epsilon_low),
        delta=getattr(args, "delta", None),
        max_completion_length=int(args.max_completion_length),
        dtype=model_dtype(trainer),
        **soft,
    )


def unsupported(trainer: Any) -> list[str]:
    """Settings under which the oracle's formulas are not TRL's: the live check does not check such a run."""
    args, out = trainer.args, []
    level = getattr(args, "importance_sampling_level", "token")
    if level != "token":
        out.append(f"importance_sampling_level={level!r} (the oracle's ratios are per token)")
    if getattr(trainer, "top_entropy_quantile", 1.0) < 1.0:
        out.append("top_entropy_quantile < 1 (the loss masks tokens the records do not say)")
    return out


def live_recorder(trainer: Any, module: types.ModuleType, logit_gaps: bool = False) -> LossRecorder:
    """The gate's TRL loss recorder on `trainer`; with `logit_gaps`, also at the functions of the release's
    log-probs and entropies (entry.py), whose results it compares with their float64 recompute (its cost is a
    float64 pass over the logits or the fused head)."""
    from harness.algorithms.grpo.targets.trl import entry
    from harness.algorithms.grpo.targets.trl.recording import Rows

    rows = Rows(trainer, RewardTap(rank=int(trainer.accelerator.process_index)))
    points = entry.entry_points(module).logits if logit_gaps else ()
    loss = LossRecorder(trainer, "_compute_loss", module, rows.fields, outputs="_get_per_token_logps_and_entropies",
                        keep=rows.training, logits=points)  # fmt: skip
    loss.around(trainer, "_generate_and_score_completions", rows.counting)
    return loss


class LiveCheck(TrainerCallback):
    """A transformers callback that checks one logging interval in `every` of a TRL GRPO run while it trains.

    `trainer`: the trainer (found from the training loop when not given). `logit_gaps`: also compare the
    log-probs and entropies with their float64 recompute at the release's functions (the gate's
    `logit_recompute`; a float64 pass over the logits per micro-batch). The rest are `LiveSession`'s:
    `first`, `report_dir`, `raise_on_failure`, `log_expected`, `max_intervals`. After training, `summary` says
    how many intervals were checked, passed and failed, and `results` holds each one's verdicts.
    """

    def __init__(self, every: int = 20, *, trainer: Any = None, logit_gaps: bool = False, **session: Any) -> None:
        self.session = LiveSession(every, **session)
        self.trainer, self.logit_gaps = trainer, logit_gaps
        self.settings: Settings | None = None
        self.geometry: Geometry | None = None
        self._module: types.ModuleType | None = None
        self._recorder: LossRecorder | None = None
        self._interval = 0
        self._handler_on_log = None
        self._disabled = ""

    @property
    def summary(self):
        return self.session.summary

    @property
    def results(self):
        return self.session.results

    # -- transformers' events ------------------------------------------------

    def on_train_begin(self, args, state, control, **kwargs):
        trainer = self.trainer = self.trainer or find_trainer(self)
        self._module, _ = trainer_module(trainer)
        self.settings = trl_settings(trainer)
        self.geometry = Geometry(int(args.steps_per_generation or args.gradient_accumulation_steps),
                                 int(args.num_iterations))  # fmt: skip
        reasons = unsupported(trainer)
        if reasons:
            self._disabled = "; ".join(reasons)
            logger.warning("live check off for this run: %s", self._disabled)
            return
        handler = trainer.callback_handler
        original = handler.on_log

        def on_log(args, state, control, logs):
            self._at_log(state, logs)
            return original(args, state, control, logs)

        handler.on_log, self._handler_on_log = on_log, original
        every_steps = getattr(state, "logging_steps", None) or args.logging_steps  # a ratio resolved to steps
        self._interval = state.global_step // max(int(every_steps), 1)
        self._start(self._interval)

    def on_train_end(self, args, state, control, **kwargs):
        self._detach()
        if not self._disabled:
            self.session.finish()

    def _detach(self) -> None:
        """Take every wrapper off the trainer and its callback handler."""
        self._stop()
        if self._handler_on_log is not None:
            self.trainer.callback_handler.__dict__.pop("on_log", None)
            self._handler_on_log = None

    # -- the intervals -------------------------------------------------------

    def _start(self, interval: int) -> None:
        if self.session.sampled(interval) and self._recorder is None:
            self._recorder = live_recorder(self.trainer, self._module, self.logit_gaps)
            self._recorder.__enter__()

    def _stop(self):
        recorder, self._recorder = self._recorder, None
        if recorder is None:
            return ()
        recorder.__exit__(None, None, None)
        return recorder.records

    def _at_log(self, state, logs) -> None:
        if not logs or "train_runtime" in logs or any(str(k).startswith("eval_") for k in logs):
            return
        if not self.trainer.model.training:
            return
        interval, self._interval = self._interval, self._interval + 1
        sampled = self._recorder is not None
        records = self._stop()
        if sampled:
            history = state.log_history[-1] if state.log_history else None
            try:
                self.session.check(records, logs, self.settings, interval, int(state.global_step), history,
                                   self.geometry)  # fmt: skip
            except LiveCheckFailed:
                self._detach()  # the run stops here: leave the trainer as it was
                raise
        self._start(self._interval)
