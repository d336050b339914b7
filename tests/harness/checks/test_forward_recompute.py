"""The forward recompute: the networks' own log-probs and values on the real tokens, left padding included."""

from __future__ import annotations

import pytest
import torch

from harness.algorithms import case
from harness.algorithms.ppo.spec import ScenarioSpec
from harness.checks import forward
from harness.errors import NotRecomputable
from harness.instrument.observe import ObservationCache

PAD = 0


def tiny(kind: str, seed: int = 0):
    """A float64 toy-world network (causal LM or value model) of vocabulary 16."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    from reference_trainers.toy import tiny_config

    torch.manual_seed(seed)
    if kind == "lm":
        model = AutoModelForCausalLM.from_config(tiny_config(16))
    else:
        model = AutoModelForSequenceClassification.from_config(tiny_config(16, num_labels=1))
    return model.double().eval()


def by_hand(model, query: list[int], response: list[int], temperature: float) -> torch.Tensor:
    """log p(y_t | real tokens before t), one unpadded row with no mask at all: the definition."""
    real = [t for t in query if t != PAD]
    ids = torch.tensor([real + response])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(real) - 1 : -1].double() / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(response).unsqueeze(-1)).squeeze(-1)


def test_recompute_of_a_hand_made_row_is_the_definition_with_and_without_left_padding():
    model = tiny("lm")
    queries = torch.tensor([[5, 6, 7, 8], [PAD, PAD, 9, 4], [PAD, 3, 3, 11]])
    responses = torch.tensor([[4, 12, 13], [7, 7, 1], [15, 2, 6]])
    got = forward.response_logprobs(model, queries, responses, PAD, temperature=0.7)
    for row in range(3):
        want = by_hand(model, queries[row].tolist(), responses[row].tolist(), 0.7)
        assert torch.allclose(got[row], want, atol=1e-10, rtol=0)
    # the left pads change nothing: the same real tokens without them give the same numbers
    alone = forward.response_logprobs(model, torch.tensor([[9, 4]]), responses[1:2], PAD, temperature=0.7)
    assert torch.allclose(got[1], alone[0], atol=1e-10, rtol=0)


def test_values_are_the_head_at_the_position_before_each_response_token_left_padding_included():
    model = tiny("value")
    queries, responses = torch.tensor([[PAD, PAD, 9, 4]]), torch.tensor([[7, 7, 1]])
    got = forward.response_values(model, queries, responses, PAD)
    with torch.no_grad():
        hidden = model.model(input_ids=torch.tensor([[9, 4, 7, 7, 1]])).last_hidden_state
        want = model.score(hidden).squeeze(-1)[0, 1:4]
    assert torch.allclose(got[0], want, atol=1e-10, rtol=0)


def test_each_row_is_matched_to_the_prompt_it_was_sampled_from():
    model = tiny("lm")
    prompts = torch.tensor([[3, 4, 5, 6], [PAD, 7, 8, 9], [PAD, PAD, 10, 11]])
    responses = torch.tensor([[12, 13], [14, 1], [5, 5]])
    given = torch.tensor([2, 0, 1])
    logprobs = forward.response_logprobs(model, prompts[given], responses, PAD, 1.0).float()
    chosen, gaps = forward.match_prompts(model, prompts, responses, logprobs, torch.ones(3, 2, dtype=torch.bool),
                                         PAD, 1.0)  # fmt: skip
    assert chosen.tolist() == given.tolist() and float(gaps.max()) < 1e-6


def test_a_run_without_models_fails_loudly_not_recomputable():
    from tests.support.gate_variants import value_head_hidden

    result = case("forward_recompute[run=lr0_uneven]").run(ObservationCache(value_head_hidden), ScenarioSpec())
    assert not result.passed and "not recomputable" in result.message and "`models`" in result.message
    with pytest.raises(NotRecomputable, match="models"):
        forward.networks_of(type("Ran", (), {"networks": None, "prompts": None})(), ("policy", "ref_policy"))


def test_the_reference_passes_on_left_padded_prompts():
    from harness.algorithms.ppo.targets.reference import factory

    result = case("forward_recompute[run=left_padded]").run(ObservationCache(factory), ScenarioSpec())
    assert result.passed, result.message
    assert {m.name for m in result.metrics} == {"forward/logprob", "forward/value"} and len(result.metrics) == 5


def test_a_forward_without_the_attention_mask_fails_on_left_padded_prompts(monkeypatch):
    """A trainer whose policy sees the ids alone (class 46) is consistent with itself; the network is not."""
    from harness.algorithms.ppo.targets.reference import factory
    from reference_trainers import ppo as trainer

    def unmasked(policy, query_responses, context_length, pad_token_id, temperature):
        return policy(input_ids=query_responses, return_dict=True).logits[:, context_length - 1 : -1] / temperature

    monkeypatch.setattr(trainer, "policy_logits", unmasked)
    result = case("forward_recompute[run=left_padded]").run(ObservationCache(factory), ScenarioSpec())
    assert not result.passed
    assert "no prompt of the run's 48 gives the policy network's log-probs" in result.message
    failing = {m.where.split(":")[0] for m in result.metrics if m.status == "fail"}
    assert failing == {"policy, rollout"}  # the rows no prompt explains are left out of the other comparisons
