"""PPO's bench target: the reference trainer on Llama models of a bench size, built from a config (no download).

`medium(spec)` and `large(spec)` are target factories (`factory(spec) -> TargetRun`), loaded by
name through `harness.targets.resolve("harness.algorithms.ppo.targets.scaled:medium")`. The world (policy,
independent reference, value model, prompts) is built once per process for a size, seed and
vocabulary, on the CPU, and each run trains a fresh deep copy of it moved to the spec's device
and dtype: building a 110M model takes seconds, a 1.1B one tens of seconds, and every timed run
must start from the same weights so that bare and spied runs sample the same tokens.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from harness.algorithms.ppo.spec import ScenarioSpec
from harness.algorithms.ppo.targets.reference import ReferenceRun, build_config, scenario_reward
from harness.bench.shapes import LARGE_SHAPE, MAX_POSITIONS, MEDIUM_SHAPE, ModelShape, llama_config
from harness.errors import HarnessConfigError
from harness.targets.logged import LogTap


@dataclass
class World:
    """The pristine models of one size, on the CPU in float32; runs train copies."""

    tokenizer: object
    policy: torch.nn.Module
    ref_policy: torch.nn.Module
    value_model: torch.nn.Module
    prompts: torch.Tensor


_WORLDS: dict[tuple, World] = {}


def _seeded(seed: int, build):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def world(shape: ModelShape, spec: ScenarioSpec) -> World:
    """The pristine world of `shape` for the spec's seed and sizes (built once per process)."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    from reference_trainers.toy import build_tokenizer

    key = (shape, spec.seed, spec.vocab_size, spec.prompt_length, spec.num_prompts)
    if key not in _WORLDS:
        positions = MAX_POSITIONS
        config = llama_config(shape, spec.vocab_size, positions)
        head_config = llama_config(shape, spec.vocab_size, positions, num_labels=1)
        policy = _seeded(spec.seed, lambda: AutoModelForCausalLM.from_config(config))
        ref_policy = _seeded(spec.seed + 4, lambda: AutoModelForCausalLM.from_config(config))
        value_model = _seeded(spec.seed + 1, lambda: AutoModelForSequenceClassification.from_config(head_config))
        generator = torch.Generator().manual_seed(spec.seed + 3)
        prompts = torch.randint(3, spec.vocab_size, (spec.num_prompts, spec.prompt_length), generator=generator)
        tokenizer = build_tokenizer(spec.vocab_size)
        for model in (policy, ref_policy):
            model.generation_config.pad_token_id = tokenizer.pad_token_id
        _WORLDS.clear()  # one size at a time: a pristine 1.1B world is 13 GB
        _WORLDS[key] = World(tokenizer, policy, ref_policy, value_model, prompts)
    return _WORLDS[key]


def build_run(shape: ModelShape, spec: ScenarioSpec) -> ReferenceRun:
    """A reference trainer for `spec` on fresh copies of the world of `shape`, on the spec's device and dtype."""
    from accelerate import Accelerator

    from reference_trainers import ConfigError
    from reference_trainers import ppo as trainer

    if spec.device.startswith("cuda") and not torch.cuda.is_available():
        raise HarnessConfigError(f"device {spec.device!r} asked for but CUDA is not available")
    dtype = getattr(torch, spec.dtype, None)
    if not isinstance(dtype, torch.dtype):
        raise HarnessConfigError(f"unknown dtype {spec.dtype!r}")
    pristine = world(shape, spec)
    policy, ref_policy, value_model = (
        copy.deepcopy(m).to(device=spec.device, dtype=dtype)
        for m in (pristine.policy, pristine.ref_policy, pristine.value_model)
    )
    ref_policy.requires_grad_(False)
    try:
        config = build_config(spec, stop_token_id=pristine.tokenizer.eos_token_id)
    except ConfigError as exc:
        raise HarnessConfigError(f"bench target: {exc}") from None
    reward, tap = scenario_reward(), LogTap()
    accelerator = Accelerator(cpu=spec.device == "cpu")
    tap.attach(accelerator)
    ppo = trainer.PPOTrainer(
        config,
        policy,
        ref_policy,
        value_model,
        reward,
        pristine.prompts,
        pristine.tokenizer.pad_token_id,
        callbacks=[tap.callback],
        accelerator=accelerator,
    )
    return ReferenceRun(
        spec, ppo, trainer, pristine.tokenizer.pad_token_id, pristine.tokenizer.eos_token_id, reward, tap
    )


def medium(spec: ScenarioSpec) -> ReferenceRun:
    """The reference trainer on ~110M-parameter Llama models (vocabulary 32k)."""
    return build_run(MEDIUM_SHAPE, spec)


def large(spec: ScenarioSpec) -> ReferenceRun:
    """The reference trainer on 1.1B-parameter Llama models (TinyLlama's shape), meant for CUDA."""
    return build_run(LARGE_SHAPE, spec)


for _factory in (medium, large):
    _factory.algorithm = "ppo"  # a target names its algorithm: the gate never guesses it
