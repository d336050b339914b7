"""`python -m harness.live --target trl-grpo | reference-grpo`: a live-checked GRPO run that anyone can repeat.

A Llama architecture built from its config (random weights from the seed, no download; 8 layers of width 512,
about 25M parameters) over the toy tokenizer (reference_trainers/toy.py: 32 tokens, `w<N>` words), a frozen
bias of 2 on the EOS logit so that completions end at uneven lengths, and a deterministic reward (the
completion's tokens whose id is a multiple of 3). `trl-grpo` trains TRL's installed `GRPOTrainer` with
`LiveCheck` added in one line; `reference-grpo` trains the reference GRPO trainer under `live_reference`, with
the same model, prompts, sizes and reward. Each checks one logging interval in `--every`.

Exit code: 0 when every checked interval passed, 1 when one failed (the log names the metric, the gap and the
diagnosis: TRL's flat mean of micro-batch means is class 16), 2 for a usage error or when no interval was checked.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import tempfile
import time
from dataclasses import dataclass

from harness import needs

TARGETS = ("trl-grpo", "reference-grpo")


@dataclass(frozen=True)
class DemoRun:
    """The sizes of the demonstration run (both targets)."""

    steps: int = 30
    every: int = 10
    per_device_train_batch_size: int = 4
    gradient_accumulation_steps: int = 4
    num_generations: int = 4
    max_completion_length: int = 16
    learning_rate: float = 1e-5
    loss_type: str = "dapo"
    beta: float = 0.0
    seed: int = 0
    hidden_size: int = 512
    layers: int = 8
    prompt_length: int = 6
    prompts: int = 32
    device: str = "cpu"


def model_config(run: DemoRun):
    """A Llama config of the toy vocabulary at the demonstration's width and depth."""
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=32, hidden_size=run.hidden_size, intermediate_size=int(2.6875 * run.hidden_size),
                       num_hidden_layers=run.layers, num_attention_heads=8, num_key_value_heads=8,
                       max_position_embeddings=128, pad_token_id=0, eos_token_id=1, bos_token_id=2,
                       tie_word_embeddings=False)  # fmt: skip


def build_model(run: DemoRun):
    """The policy, random weights from the seed, with the frozen EOS bias."""
    import torch
    from transformers import AutoModelForCausalLM

    from harness.algorithms.grpo.targets.trl.world import EOS_LOGIT_BIAS, add_logit_biases

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(run.seed)
        model = AutoModelForCausalLM.from_config(model_config(run))
    add_logit_biases(model, {1: EOS_LOGIT_BIAS})
    model.generation_config.pad_token_id = 0
    return model.to(run.device)


def prompt_ids(run: DemoRun):
    """(prompts, prompt_length) token ids from the seed, none of them special."""
    import torch

    generator = torch.Generator().manual_seed(run.seed + 3)
    return torch.randint(3, 32, (run.prompts, run.prompt_length), generator=generator)


def multiple_of_3(ids) -> float:
    return float(sum(1 for t in ids if t % 3 == 0 and t > 2))


def trl_reward(completion_ids, **kwargs) -> list[float]:
    """The reward handed to TRL: each completion's tokens whose id is a multiple of 3."""
    return [multiple_of_3(ids) for ids in completion_ids]


def reference_reward(queries, responses):
    """The same reward for the reference trainer (responses are pad-filled after the stop token)."""
    import torch

    return torch.tensor([multiple_of_3(r) for r in responses.tolist()], dtype=torch.float32)


def trl_trainer(run: DemoRun, workdir: str):
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from trl import GRPOConfig, GRPOTrainer

    from reference_trainers.toy import build_tokenizer

    prompts = [" ".join(f"w{t}" for t in row) for row in prompt_ids(run).tolist()]
    args = GRPOConfig(output_dir=workdir, per_device_train_batch_size=run.per_device_train_batch_size,
                      gradient_accumulation_steps=run.gradient_accumulation_steps,
                      num_generations=run.num_generations, max_completion_length=run.max_completion_length,
                      max_steps=run.steps, logging_steps=1, learning_rate=run.learning_rate,
                      lr_scheduler_type="constant", loss_type=run.loss_type, beta=run.beta, seed=run.seed,
                      data_seed=run.seed, use_cpu=run.device == "cpu", bf16=False, fp16=False, report_to=[],
                      save_strategy="no", disable_tqdm=True, log_completions=False, max_grad_norm=1.0)  # fmt: skip
    trainer = GRPOTrainer(
        model=build_model(run),
        reward_funcs=[trl_reward],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        processing_class=build_tokenizer(32),
    )
    for noisy in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(noisy)
    return trainer


def reference_trainer(run: DemoRun):
    from accelerate import Accelerator

    from reference_trainers import grpo

    config = grpo.GRPOConfig(per_device_train_batch_size=run.per_device_train_batch_size,
                             gradient_accumulation_steps=run.gradient_accumulation_steps,
                             num_generations=run.num_generations, max_completion_length=run.max_completion_length,
                             max_steps=run.steps, logging_steps=1, learning_rate=run.learning_rate, stop_token_id=1,
                             loss_type=run.loss_type, beta=run.beta, seed=run.seed, max_grad_norm=1.0)  # fmt: skip
    return grpo.GRPOTrainer(config, build_model(run), None, {"multiple_of_3": reference_reward}, prompt_ids(run), 0,
                            accelerator=Accelerator(cpu=run.device == "cpu"))  # fmt: skip


def parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.live", description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=TARGETS, required=True,
                        help="trl-grpo: TRL's installed GRPOTrainer with LiveCheck; reference-grpo: the reference "
                        "GRPO trainer under live_reference")  # fmt: skip
    parser.add_argument("--steps", type=int, default=DemoRun.steps, help="optimizer steps (one log each)")
    parser.add_argument("--every", type=int, default=DemoRun.every, help="check one logging interval in EVERY")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--layers", type=int, default=DemoRun.layers,
                        help=f"the Llama's decoder layers (default {DemoRun.layers})")  # fmt: skip
    parser.add_argument("--hidden-size", type=int, default=DemoRun.hidden_size,
                        help=f"the Llama's width (default {DemoRun.hidden_size}; 8 heads)")  # fmt: skip
    parser.add_argument("--report-dir", default="reports", help="the JSON reports go to REPORT_DIR/live/TARGET")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.every < 1 or args.layers < 1 or args.hidden_size < 8:
        parser.error("--steps, --every and --layers must be positive, --hidden-size at least 8")
    # checked before the run (one line naming what to install, from harness/live/__main__.py); no pytest: live mode
    # needs none of the package's extras
    needs.require("torch", *(("trl",) if args.target == "trl-grpo" else ()))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    logging.getLogger("harness.live").setLevel(logging.INFO)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    run = DemoRun(steps=args.steps, every=args.every, device=args.device, layers=args.layers,
                  hidden_size=args.hidden_size)  # fmt: skip
    reports = os.path.join(args.report_dir, "live", args.target)
    start, cpu = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory(prefix="harness-live-") as workdir, contextlib.ExitStack() as stack:
        stack.enter_context(_quiet_warnings())
        if args.target == "trl-grpo":
            import importlib.metadata

            from .trl import LiveCheck

            trainer = trl_trainer(run, workdir)
            what = f"TRL {importlib.metadata.version('trl')} GRPOTrainer"
            size = parameters(trainer.model)
            print(f"live demo: {what}, Llama {size / 1e6:.1f}M parameters ({run.layers} layers, width "
                  f"{run.hidden_size}), {run.steps} steps, one interval in {run.every} checked, {run.device}",
                  flush=True)  # fmt: skip
            live = LiveCheck(every=run.every, report_dir=reports)
            trainer.add_callback(live)
            trainer.train()
            summary = live.summary
        else:
            from .reference import live_reference

            trainer = reference_trainer(run)
            size = parameters(trainer.model)
            print(f"live demo: reference GRPOTrainer, Llama {size / 1e6:.1f}M parameters ({run.layers} layers, "
                  f"width {run.hidden_size}), {run.steps} steps, one interval in {run.every} checked, {run.device}",
                  flush=True)  # fmt: skip
            with live_reference(trainer, every=run.every, report_dir=reports) as live:
                trainer.train()
            summary = live.summary
    wall, used = time.perf_counter() - start, time.process_time() - cpu
    print(
        f"live demo: {summary.checked} interval(s) checked, {summary.failed} failed; run {wall:.1f} s wall, "
        f"{used:.1f} s CPU, of which the checks {summary.cpu_seconds:.3f} s; reports: {reports}",
        flush=True,
    )
    if summary.checked == 0:
        return 2
    return 1 if summary.failed else 0


@contextlib.contextmanager
def _quiet_warnings():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
