"""GRPO's live bench run (harness/bench/live.py measures it): the reference GRPO trainer on the medium bench model.

The reference GRPO trainer (reference_trainers/grpo.py) on the medium size's Llama (harness/bench/shapes.py, built from
its config), completions of 128 tokens after prompts of 16, 2 rows per micro-batch, 3 micro-batches per optimizer step,
one log per step. The policy and prompts are built once per process; each run trains a copy of that pristine policy from
the same seed, so a bare run and a live-checked one sample the same tokens and do the same work.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from harness.bench.shapes import MAX_POSITIONS, MEDIUM_SHAPE, llama_config


@dataclass(frozen=True)
class LiveBenchRun:
    """The medium GRPO run's sizes."""

    steps: int = 4
    per_device_train_batch_size: int = 2
    gradient_accumulation_steps: int = 3
    num_generations: int = 3
    max_completion_length: int = 128
    prompt_length: int = 16
    prompts: int = 24
    vocab_size: int = 32000
    learning_rate: float = 1e-5
    seed: int = 0


_PRISTINE: dict = {}


def pristine(run: LiveBenchRun, device: str):
    """The medium policy and prompts, built once per process (on the CPU, float32)."""
    import torch
    from transformers import AutoModelForCausalLM

    key = (run, device)
    if key not in _PRISTINE:
        config = llama_config(MEDIUM_SHAPE, run.vocab_size, MAX_POSITIONS)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(run.seed)
            policy = AutoModelForCausalLM.from_config(config)
        policy.generation_config.pad_token_id = 0
        generator = torch.Generator().manual_seed(run.seed + 3)
        prompts = torch.randint(3, run.vocab_size, (run.prompts, run.prompt_length), generator=generator)
        _PRISTINE[key] = (policy, prompts)
    return _PRISTINE[key]


def trainer(run: LiveBenchRun, device: str, steps: int):
    """A fresh reference GRPO trainer on a copy of the pristine policy."""
    from accelerate import Accelerator

    from reference_trainers import grpo, toy

    policy, prompts = pristine(run, device)
    config = grpo.GRPOConfig(per_device_train_batch_size=run.per_device_train_batch_size,
                             gradient_accumulation_steps=run.gradient_accumulation_steps,
                             num_generations=run.num_generations, max_completion_length=run.max_completion_length,
                             max_steps=steps, logging_steps=1, learning_rate=run.learning_rate, stop_token_id=1,
                             loss_type="dapo", beta=0.0, seed=run.seed)  # fmt: skip
    model = copy.deepcopy(policy).to(device)
    reward = toy.count_token_reward(7)
    return grpo.GRPOTrainer(config, model, None, {"count_w7": reward}, prompts, 0,
                            accelerator=Accelerator(cpu=device == "cpu"))  # fmt: skip
