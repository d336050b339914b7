"""The live check of TRL's `GRPOTrainer` (or a subclass, or a trainer module with its names): one callback.

    trainer = GRPOTrainer(model=..., args=GRPOConfig(...), ...)
    trainer.add_callback(LiveCheck(every=20))
    trainer.train()

At the start of each sampled logging interval the callback installs the gate's loss recorder on the trainer
(`harness.algorithms.grpo.targets.trl.recording`: TRL's `_compute_loss`, its one call of
`_get_per_token_logps_and_entropies`, and `_generate_and_score_completions`), which records each micro-batch's
inputs and outputs as the gate's TRL adapter does, without the float64 recompute of the logits; at the
interval's log it takes the recorder off, checks the records (every rank's) against what TRL logged, and adds
the verdict (`live/<name>_expected`, `_gap`, `_pass`, `live/pass`) to the logs before any callback or tracker
(`report_to`) sees them. Outside the sampled intervals nothing of the trainer is wrapped. The recorder's wrappers
call TRL's own methods with the same arguments and return what they return; an error of the check is one WARNING
line, never an exception in the training loop.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import sys
import types
from typing import Any

from transformers import TrainerCallback

from harness.algorithms.grpo import live as checks
from harness.algorithms.grpo.live import GenerationCut
from harness.algorithms.grpo.oracle.expect import Settings
from harness.algorithms.grpo.spec import GRPOSpec
from harness.errors import HarnessConfigError
from harness.instrument.loss_recorder import LossRecorder
from harness.instrument.reward_calls import RewardTap
from harness.live.interval import Held
from harness.live.session import LiveConfigError, LiveSession, logger


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
    """The run's dtype: bfloat16 under `bf16`, float16 under `fp16`, else the policy's parameters'. The pooled
    metrics' tolerances come from the dtype their recorded terms were held in (docs/tolerances.md); this one picks
    the table's rows for the rest (the logit gaps, the gradient) and stands in where a record does not say."""
    if getattr(trainer.args, "bf16", False):
        return "bfloat16"
    if getattr(trainer.args, "fp16", False):
        return "float16"
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
        off_policy_mask_threshold=getattr(args, "off_policy_mask_threshold", None),
        **soft,
    )


def unsupported(trainer: Any) -> list[str]:
    """Settings under which the oracle's formulas are not TRL's: the live check does not check such a run."""
    args, out = trainer.args, []
    level = getattr(args, "importance_sampling_level", "token")
    if level != "token":
        out.append(f"importance_sampling_level={level!r} (the oracle's ratios are per token)")
    if getattr(trainer, "top_entropy_quantile", 1.0) < 1.0:
        out.append("top_entropy_quantile < 1 (the live oracle's settings do not carry the entropy mask yet)")
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
                        keep=rows.training, logits=points, tolerant=True)  # fmt: skip
    loss.around(trainer, "_generate_and_score_completions", rows.counting)
    return loss


def _saves(args: Any) -> bool:
    """Whether the trainer saves checkpoints at all (its `save_strategy` is not "no")."""
    strategy = getattr(args, "save_strategy", "no")
    return str(getattr(strategy, "value", strategy)) != "no"


class LiveCheck(TrainerCallback, Held):
    """A transformers callback that checks one logging interval in `every` of a TRL GRPO run while it trains.

    `every`, `first` (counted from 1: the logs `first`, `first + every`, ...), `report_dir`, `raise_on_failure`,
    `log_expected`, `max_intervals`: `LiveSession`'s, validated here (LiveConfigError naming the option).
    `trainer`: the trainer (found from the training loop when not given). `logit_gaps`: also compare the log-probs
    and entropies with their float64 recompute at the release's functions (the gate's `logit_recompute`; a float64
    pass over the logits per micro-batch).

    It never harms the run: an error of the check is one WARNING line and the run goes on. With
    `raise_on_failure`, a failing interval ends the run through transformers' own control
    (`control.should_training_stop`, and `should_save` when the run saves checkpoints): the step ends, the trainer
    saves, every callback's `on_train_end` runs and `train()` returns; `failed` is then True, and
    `raise_if_failed()` raises `LiveCheckFailed` for a script that should end with an error. After training,
    `summary` says how many intervals were checked, passed and failed, and `results` holds each one's verdicts.
    """

    def __init__(
        self,
        every: int = 20,
        *,
        first: int = 1,
        report_dir: Any = None,
        raise_on_failure: bool = False,
        log_expected: bool = True,
        max_intervals: int | None = None,
        trainer: Any = None,
        logit_gaps: bool = False,
    ) -> None:
        if not isinstance(logit_gaps, bool):
            raise LiveConfigError(f"live check: logit_gaps={logit_gaps!r} must be True or False")
        if trainer is not None and not hasattr(trainer, "callback_handler"):
            raise LiveConfigError(f"live check: trainer={type(trainer).__name__} is not a transformers Trainer "
                                  "(it has no callback_handler)")  # fmt: skip
        self.session = LiveSession(every, first=first, report_dir=report_dir, raise_on_failure=raise_on_failure,
                                   log_expected=log_expected, max_intervals=max_intervals, checks=checks)  # fmt: skip
        self.trainer, self.logit_gaps = trainer, logit_gaps
        self.settings: Settings | None = None
        self.geometry: GenerationCut | None = None
        self._module: types.ModuleType | None = None
        self._recorder: LossRecorder | None = None
        self._broken = ""
        """Why the recorder of the current sampled interval could not be installed ('' when it was)."""
        self._interval = 0
        self._handler_on_log = None
        self._disabled = ""

    # -- transformers' events ------------------------------------------------

    def on_train_begin(self, args, state, control, **kwargs):
        try:
            self._begin(args, state)
        except Exception as why:  # noqa: BLE001 - a run the check cannot hold trains unchecked
            self._disabled = f"{type(why).__name__}: {why}"
            with contextlib.suppress(Exception):
                self._detach()
            self._off()

    def _begin(self, args, state) -> None:
        trainer = self.trainer = self.trainer or find_trainer(self)
        self._module, _ = trainer_module(trainer)
        self.settings = trl_settings(trainer)
        self.geometry = GenerationCut(int(args.steps_per_generation or args.gradient_accumulation_steps),
                                 int(args.num_iterations))  # fmt: skip
        reasons = unsupported(trainer)
        if reasons:
            self._disabled = "; ".join(reasons)
            self._off()
            return
        handler = trainer.callback_handler
        original = handler.on_log

        def on_log(args, state, control, logs):
            if self.session.stop_for(self._at_log(state, logs)):
                control.should_training_stop = True
                if _saves(args):
                    control.should_save = True  # the last checkpoint, as at the end of training
            return original(args, state, control, logs)

        handler.on_log, self._handler_on_log = on_log, original
        every_steps = getattr(state, "logging_steps", None) or args.logging_steps  # a ratio resolved to steps
        self._interval = state.global_step // max(int(every_steps), 1)
        self.session.arm(self.settings, f"{type(trainer).__name__} (TRL)")
        self._start(self._interval, state.global_step)

    def _off(self) -> None:
        """Say once (the main process) that this run trains unchecked, and why."""
        main = self.session._main()
        logger.log(logging.WARNING if main else logging.DEBUG, "live check off for this run: %s", self._disabled)

    def on_train_end(self, args, state, control, **kwargs):
        with contextlib.suppress(Exception):
            self._detach()
        if not self._disabled:
            self.session.finish()

    def _detach(self) -> None:
        """Take every wrapper off the trainer and its callback handler."""
        with contextlib.suppress(Exception):  # a failed recording was reported at its log, or goes unchecked
            self._stop()
        if self._handler_on_log is not None:
            self.trainer.callback_handler.__dict__.pop("on_log", None)
            self._handler_on_log = None

    # -- the intervals -------------------------------------------------------

    def _start(self, interval: int, step: int) -> None:
        """Install the recorder when log `interval + 1` is sampled; when that fails, the interval is not checked
        (the log says so at its check, on every rank alike)."""
        self._broken = ""
        if not self.session.sampled(interval) or self._recorder is not None:
            return
        try:
            recorder = live_recorder(self.trainer, self._module, self.logit_gaps)
            recorder.__enter__()
        except Exception as why:  # noqa: BLE001 - the interval goes unchecked, the run goes on
            self._broken = f"the recorder could not be installed: {type(why).__name__}: {why}"
            return
        self._recorder = recorder

    def _stop(self):
        recorder, self._recorder = self._recorder, None
        if recorder is None:
            return ()
        recorder.__exit__(None, None, None)
        return recorder.checked_records()

    def _at_log(self, state, logs):
        """At a training log: check the interval if it was sampled, and install the recorder for the next one. The
        interval's result, or None; it never raises."""
        if not logs or "train_runtime" in logs or any(str(k).startswith("eval_") for k in logs):
            return None
        if not self.trainer.model.training:
            return None
        interval, self._interval = self._interval, self._interval + 1
        step = int(state.global_step)
        sampled, broken = self._recorder is not None or bool(self._broken), self._broken
        result = None
        if sampled:
            records, why = (), broken
            try:
                records = self._stop()
            except Exception as error:  # noqa: BLE001
                why = why or f"the recorder failed: {type(error).__name__}: {error}"
            history = state.log_history[-1] if state.log_history else None
            result = self.session.check(records, logs, self.settings, interval, step, history, self.geometry,
                                        unusable=why)  # fmt: skip
        self._start(self._interval, step)
        return result
