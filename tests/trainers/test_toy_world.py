"""reference_trainers/toy.py: each `build_world` call is a world of its own, equal tensor for tensor to a fresh build,
though it is a copy of the one its arguments built first."""

from __future__ import annotations

import inspect

import pytest
import torch

from reference_trainers import toy

MODELS = ("policy", "ref_policy", "value_model", "reward_model")
ARGS = {"seed": 5, "independent_ref": True, "pad_logit_bias": 1.5, "prompt_pads": 2, "dropout": 0.1}


def fresh(**kwargs) -> toy.ToyWorld:
    """The world built anew, past the cache: the builder `pristine_world` wraps."""
    spec = inspect.signature(toy.build_world).bind(**kwargs)
    spec.apply_defaults()
    return toy.pristine_world.__wrapped__(**{**spec.arguments, "device": str(spec.arguments["device"])})


def assert_same_world(a: toy.ToyWorld, b: toy.ToyWorld) -> None:
    for name in MODELS:
        left, right = dict(getattr(a, name).state_dict()), dict(getattr(b, name).state_dict())
        assert left.keys() == right.keys()
        for key in left:
            assert left[key].dtype == right[key].dtype and torch.equal(left[key], right[key]), (name, key)
        assert [p.requires_grad for p in getattr(a, name).parameters()] == [
            p.requires_grad for p in getattr(b, name).parameters()
        ]
    assert torch.equal(a.prompts, b.prompts)
    assert (a.pad_token_id, a.stop_token_id) == (b.pad_token_id, b.stop_token_id)
    assert a.tokenizer("w3 w9 w4")["input_ids"] == b.tokenizer("w3 w9 w4")["input_ids"]
    assert a.policy.generation_config.pad_token_id == b.policy.generation_config.pad_token_id


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_copied_world_is_the_world_built_anew(dtype):
    toy.build_world(**ARGS, dtype=dtype)  # the first call builds and keeps it
    before = toy.pristine_world.cache_info().hits
    copied = toy.build_world(**ARGS, dtype=dtype)
    assert toy.pristine_world.cache_info().hits == before + 1  # this one was copied
    assert_same_world(copied, fresh(**ARGS, dtype=dtype))


def test_worlds_share_nothing_a_trainer_could_change():
    a, b = toy.build_world(**ARGS), toy.build_world(**ARGS)
    pointers = {p.data_ptr() for name in MODELS for p in getattr(b, name).parameters()}
    assert not pointers & {p.data_ptr() for name in MODELS for p in getattr(a, name).parameters()}
    with torch.no_grad():
        for p in a.policy.parameters():
            p.add_(1.0)
    a.prompts.zero_()
    a.tokenizer.padding_side = "right"
    a.policy.generation_config.pad_token_id = 7
    c = toy.build_world(**ARGS)
    assert_same_world(b, c)
    assert_same_world(c, fresh(**ARGS))
    assert c.tokenizer.padding_side == "left"


def test_building_or_copying_moves_no_global_random_state():
    for seed in (11, 11):  # a miss, then a hit
        state = torch.get_rng_state()
        toy.build_world(seed=seed)
        assert torch.equal(torch.get_rng_state(), state)


def test_a_device_named_either_way_is_the_same_world_and_bad_pads_raise_every_time():
    toy.build_world(seed=12, device="cpu")
    hits = toy.pristine_world.cache_info().hits
    toy.build_world(seed=12, device=torch.device("cpu"))
    assert toy.pristine_world.cache_info().hits == hits + 1
    for _ in range(2):
        with pytest.raises(ValueError, match="prompt_pads"):
            toy.build_world(seed=12, prompt_pads=6)
