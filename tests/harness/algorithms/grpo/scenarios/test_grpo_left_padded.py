"""forward_recompute[prompt_pads=3]: GRPO's forward recompute on left-padded prompts of 3 to 6 real tokens. The
reference passes; a loss forward that attends to the prompts' pads fails it by name (and passes the unpadded
point); position ids counted from the padded start pass (the toy policy's rotary positions are relative); a target
that ignores prompt_pads fails it loudly. The TRL target's prompts: texts of the real tokens, read back padded."""

from __future__ import annotations

import pytest
import torch

from harness.algorithms import case
from harness.algorithms.grpo.spec import GRPOSpec
from harness.errors import HarnessConfigError
from harness.instrument.observe import ObservationCache
from tests.support.gate_variants import swapped_during_training
from tests.support.gates import reference as shared_reference

PADDED = "forward_recompute[prompt_pads=3]"


def run_check(check_id: str, factory):
    return case(check_id, "grpo").run(ObservationCache(factory), GRPOSpec())


def with_logits(replacement):
    """The reference GRPO target whose trainer computes its logits with `replacement(original)`."""
    from harness.algorithms.grpo.targets.reference import factory

    def build(spec, accelerator=None):
        return swapped_during_training(factory(spec, accelerator), "policy_logits", replacement)

    build.algorithm = "grpo"
    return build


def loss_forward_without_mask(original):
    """Bug class 85 (g85): the loss's forward (the one under autograd) given the token ids alone, so a completion
    attends to its prompt's left pads; the rollout's, old and reference log-probs (no_grad) stay right."""

    def policy_logits(policy, ids, context, pad, temperature):
        if not torch.is_grad_enabled():
            return original(policy, ids, context, pad, temperature)
        return policy(input_ids=ids, return_dict=True).logits[:, context - 1 : -1] / temperature

    return policy_logits


def positions_from_padded_start(original):
    """The attention mask kept, the position ids left to the model: counted from the padded start."""
    from reference_trainers.common import model_inputs

    def policy_logits(policy, ids, context, pad, temperature):
        inputs = model_inputs(ids, pad)
        inputs.pop("position_ids")
        return policy(**inputs, return_dict=True).logits[:, context - 1 : -1] / temperature

    return policy_logits


def test_the_reference_passes_and_compares_padded_rows():
    result = case(PADDED, "grpo").run(shared_reference("grpo"), GRPOSpec())
    assert result.passed, result.message
    assert "explained by a left-padded prompt" in " ".join(result.notes)


def test_a_loss_forward_over_the_pads_fails_the_padded_point_alone():
    bug = with_logits(loss_forward_without_mask)
    result = run_check(PADDED, bug)
    assert not result.passed
    assert "no prompt of the run's 48 gives the policy network's log-probs" in result.message
    unpadded = run_check("forward_recompute", bug)
    assert unpadded.passed, unpadded.message


def test_positions_counted_from_the_padded_start_pass_a_rotary_policy():
    result = run_check(PADDED, with_logits(positions_from_padded_start))
    assert result.passed, result.message


def test_a_target_that_ignores_prompt_pads_fails_loudly():
    from harness.algorithms.grpo.targets.reference import factory

    def unpadded(spec, accelerator=None):
        return factory(spec.with_(prompt_pads=0), accelerator)

    unpadded.algorithm = "grpo"
    result = run_check(PADDED, unpadded)
    assert not result.passed and "does not honour prompt_pads" in result.message


@pytest.mark.parametrize("pads", [-1, 6])
def test_prompt_pads_must_leave_a_real_token(pads):
    with pytest.raises(HarnessConfigError, match="prompt_pads"):
        GRPOSpec(prompt_pads=pads).validate()


def test_trl_prompts_are_their_real_tokens_read_back_left_padded():
    from harness.algorithms.grpo.targets.trl.world import encoded_prompts, prompt_texts
    from reference_trainers.toy import build_tokenizer

    tokenizer, pad = build_tokenizer(32), 0
    prompts = torch.tensor([[5, 6, 7], [0, 8, 9], [0, 0, 31]])
    texts = prompt_texts(prompts, pad)
    assert texts == ["w5 w6 w7 ", "w8 w9 ", "w31 "]
    assert torch.equal(encoded_prompts(tokenizer, texts, prompts, pad), prompts)
    with pytest.raises(HarnessConfigError, match="do not encode"):
        encoded_prompts(tokenizer, texts, prompts.flip(0), pad)
