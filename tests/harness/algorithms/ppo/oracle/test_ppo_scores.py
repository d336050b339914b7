"""The reward-model side of the oracle: the recorder on a reward model, and each rollout row's score derived
from its records (docs/metrics.md, "The update": the head at the row's last real token)."""

from __future__ import annotations

import types

import pytest
import torch

from harness.algorithms.ppo.instruments import PPORecords
from harness.algorithms.ppo.oracle import returns
from harness.algorithms.ppo.oracle.expect import score_expectations
from harness.algorithms.ppo.oracle.scores import NO_RECORD, Unscored, expected_scores, update_scores
from harness.algorithms.ppo.view import RolloutView, UpdateView
from harness.errors import HarnessConfigError, NotRecomputable
from harness.instrument.grad import GradTrace
from harness.instrument.observe import Ran
from harness.instrument.records import RewardHeadCall, Site
from harness.oracle.masks import derive_masks

PAD, STOP = 0, 9
QUERY = 2
SITE = Site("<reward_model>", "reward_model", "reward_head")


def finished(prompts=None, **kept) -> Ran:
    """A finished run that logged nothing, with `prompts` and a PPO record of `kept` (its scores, texts, ...)."""
    return Ran((), GradTrace(), PAD, STOP, PPORecords(**kept), prompts=prompts)


def rollout(responses) -> RolloutView:
    responses = torch.tensor(responses)
    r, v = derive_masks(responses, STOP, PAD)
    zeros = torch.zeros(responses.shape, dtype=torch.float64)
    return RolloutView(responses, zeros, zeros, r, v, zeros, None, (responses == STOP).any(dim=-1))


def update(ro: RolloutView, records=()) -> UpdateView:
    return UpdateView(0, 0, ro, None, (), (), tuple(records), ())


def scored(queries, responses, outputs=None, mask=True, seq=0) -> RewardHeadCall:
    """A head forward over query + response rows (pad masked out of the attention, as trainers pass it)."""
    ids = torch.cat([torch.tensor(queries), torch.tensor(responses)], dim=1)
    if outputs is None:  # position p of row i outputs 100 * i + p: which position was read shows in the value
        outputs = 100.0 * torch.arange(ids.shape[0]).unsqueeze(1) + torch.arange(ids.shape[1])
    attention = ids != PAD if mask else None
    return RewardHeadCall(SITE, seq, values=outputs.double(), input_ids=ids, attention_mask=attention)


# a response stopped early (tokens after the stop), one that fills the width, and an empty one
RESPONSES = [[4, STOP, 7, 7], [4, 5, 6, 7], [PAD, PAD, PAD, PAD]]
TRUNCATED = [[4, STOP, PAD, PAD], [4, 5, 6, 7], [PAD, PAD, PAD, PAD]]
QUERIES = [[3, 3], [5, 6], [7, 8]]


def test_the_score_is_the_head_at_the_last_real_token_and_the_last_query_token_when_empty():
    got = expected_scores(update(rollout(RESPONSES), [scored(QUERIES, TRUNCATED)]), PAD, STOP)
    # row 0: the stop token at response position 1; row 1: the last position; row 2: the last query token
    assert got.tolist() == [0 + QUERY + 1, 100 + QUERY + 3, 200 + QUERY - 1]
    assert got.dtype == torch.float64


def test_rows_scored_in_another_order_are_paired_by_their_token_ids():
    order = [2, 0, 1]
    record = scored([QUERIES[i] for i in order], [TRUNCATED[i] for i in order])
    got = expected_scores(update(rollout(RESPONSES), [record]), PAD, STOP)
    assert got.tolist() == [100 + QUERY + 1, 200 + QUERY + 3, 0 + QUERY - 1]


def test_rows_in_several_records_and_pads_read_through_the_attention_mask():
    ids_pad_filled = [[4, STOP, 1, 1], [4, 5, 6, 7], [1, 1, 1, 1]]  # a trainer that fills masked positions with 1
    first = scored(QUERIES[:2], ids_pad_filled[:2], seq=0)
    second = scored([[PAD, 7, 8]], ids_pad_filled[2:], seq=1)  # another chunk, its prompt left-padded to 3
    for record, query, rows in ((first, QUERIES[:2], TRUNCATED[:2]), (second, [[PAD, 7, 8]], TRUNCATED[2:])):
        attention = torch.cat([torch.tensor(query) != PAD, torch.tensor(rows) != PAD], dim=1)
        object.__setattr__(record, "attention_mask", attention)
    got = expected_scores(update(rollout(RESPONSES), [first, second]), PAD, STOP)
    assert got.tolist() == [QUERY + 1, 100 + QUERY + 3, 3 - 1]


def test_identical_responses_scored_alike_are_fine_and_scored_apart_are_ambiguous():
    responses = [[PAD] * 4, [4, 5, 6, 7], [PAD] * 4]  # two empty responses to two prompts
    ro = rollout(responses)
    order = [1, 0, 2]  # not the rollout's order: the ids alone must pair them
    outputs = torch.tensor([[0.0, 0.5, 1.0, 1.0, 1.0, 1.0], [0.0, 0.5, 0, 0, 0, 0], [0.0, 0.5, 0, 0, 0, 0]])
    same = scored([QUERIES[i] for i in order], [responses[i] for i in order], outputs)
    assert expected_scores(update(ro, [same]), PAD, STOP).tolist() == [0.5, 1.0, 0.5]
    outputs[2, QUERY - 1] = 0.25  # the second empty response's prompt scores otherwise
    apart = scored([QUERIES[i] for i in order], [responses[i] for i in order], outputs)
    got = expected_scores(update(ro, [apart]), PAD, STOP)
    assert isinstance(got, Unscored) and "ambiguous" in got.reason


def test_what_the_records_cannot_settle_is_unscored_with_the_reason():
    ro = rollout(RESPONSES)
    untruncated = scored(QUERIES, RESPONSES)  # tokens after the stop scored as well: not the contract's row
    cases = (
        ("no reward-head forward was recorded", []),
        ("is in no row the reward model scored", [scored(QUERIES[:2], TRUNCATED[:2])]),
        ("rollout row 0's response (truncated at the stop token) is in no row", [untruncated]),
        ("without the input ids", [RewardHeadCall(SITE, 0, values=torch.zeros(3, 6, dtype=torch.float64))]),
        ("hold no query", [scored([[], [], []], TRUNCATED)]),
        ("expected one value per input position", [scored(QUERIES, TRUNCATED, torch.zeros(3, 5))]),
    )
    for reason, records in cases:
        got = expected_scores(update(ro, records), PAD, STOP)
        assert isinstance(got, Unscored) and reason in got.reason, (reason, got)


def test_unknown_scores_fail_where_no_scores_are_optional():
    reason = Unscored(f"update 0: {NO_RECORD}")
    optional = score_expectations(None, 3, 0.0, 0.1)
    required = score_expectations(reason, 3, 0.0, 0.1)
    assert all(not e.required for e in optional.values())
    assert all(e.required and e.value is None and NO_RECORD in e.reason for e in required.values())
    spec = types.SimpleNamespace(kl_coef=0.1, kl_estimator="k1", missing_eos_penalty=None)
    with pytest.raises(NotRecomputable, match="no reward-head forward was recorded"):
        returns.rewards(rollout(RESPONSES), reason, spec)


def test_a_run_with_a_reward_model_takes_the_oracle_scores_not_the_handed_ones():
    records = [scored(QUERIES, TRUNCATED)]
    updates = [update(rollout(RESPONSES), records), update(rollout(RESPONSES))]
    first, second = update_scores(finished(reward_model=True, scores=(torch.ones(3),) * 2), updates)
    assert first.tolist() == [QUERY + 1, 100 + QUERY + 3, 200 + QUERY - 1]
    assert isinstance(second, Unscored) and NO_RECORD in second.reason
    handed = finished(reward_model=False, scores=(torch.ones(3),) * 2)
    assert [s.tolist() for s in update_scores(handed, updates)] == [[1.0] * 3] * 2
    assert update_scores(finished(reward_model=False, scores=None), updates) == [None, None]


class TinyRewardModel(torch.nn.Module):
    """A reward model in transformers' shape: a backbone named by `base_model_prefix`, a scalar head `score`."""

    base_model_prefix = "body"

    def __init__(self) -> None:
        super().__init__()
        self.body = Body()
        self.score = torch.nn.Linear(4, 1)

    def forward(self, input_ids, attention_mask=None):
        return self.score(self.body(input_ids, attention_mask))


class Body(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(16, 4)

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        return self.embed(input_ids) * attention_mask.unsqueeze(-1)


def test_the_recorder_keeps_each_head_output_with_the_ids_and_mask_of_its_rows():
    from harness.instrument.rewards import RewardRecorder
    from harness.instrument.spy import Spy

    module = types.ModuleType("fake_trainer")
    module.masked_mean = lambda values, mask, axis=None: (values * mask).sum() / mask.sum()
    module.selective_log_softmax = lambda logits, index: logits.log_softmax(-1).gather(-1, index[..., None])[..., 0]
    model = TinyRewardModel()
    ids = torch.tensor([[3, 4, 5, 0], [6, 7, 0, 0]])
    mask = ids != 0
    with Spy(module) as spy, RewardRecorder(model, spy), torch.no_grad():
        head = model.score(model.body(input_ids=ids, attention_mask=mask))  # as TRL's get_reward calls it
        module.masked_mean(torch.ones(2, 2), torch.ones(2, 2, dtype=torch.bool))
        whole = model(ids[:1], mask[:1])  # the whole model, the backbone called positionally
        with spy.paused():
            model(ids, mask)
    model(ids, mask)  # after the context: no hook left
    kinds = [type(r).__name__ for r in spy.records]
    assert kinds == ["RewardHeadCall", "MaskedMeanCall", "RewardHeadCall"]
    first, _, second = spy.records
    assert torch.equal(first.input_ids, ids) and torch.equal(first.attention_mask, mask)
    assert first.values.dtype == torch.float64 and torch.equal(first.values, head.squeeze(-1).double())
    assert torch.equal(second.input_ids, ids[:1]) and torch.equal(second.values, whole.squeeze(-1).double())
    assert first.seq < spy.records[1].seq < second.seq


def test_a_reward_model_without_a_scalar_head_is_a_usage_error():
    from harness.instrument.rewards import RewardRecorder
    from harness.instrument.spy import Spy

    module = types.ModuleType("fake_trainer")
    module.masked_mean = module.selective_log_softmax = lambda *a, **k: None
    with Spy(module) as spy, pytest.raises(HarnessConfigError, match="no scalar head module `score`"):
        RewardRecorder(torch.nn.Linear(2, 1), spy)


def test_ranks_scores_join_in_rank_order_and_an_unknown_rank_makes_them_unknown():
    from harness.algorithms.ppo.oracle.scores import joined

    assert joined([torch.tensor([1.0]), torch.tensor([2.0, 3.0])]).tolist() == [1.0, 2.0, 3.0]
    assert joined([torch.tensor([1.0]), None]) is None
    why = Unscored("rank 1 scored nothing")
    assert joined([torch.tensor([1.0]), why, None]) is why


# ---------------------------------------------------------------- a reward on decoded text


class WordTokenizer:
    """Decodes ids as words, special ids (pad, stop) dropped when asked: the toy world's tokenizer in miniature."""

    def batch_decode(self, rows, skip_special_tokens=False):
        special = {PAD: "[PAD]", STOP: "[EOS]"}
        return [
            " ".join(special[i] if i in special else f"w{i}" for i in row if not (skip_special_tokens and i in special))
            for row in rows
        ]


WORDS = WordTokenizer()


def text_run(seen, tokenizer=WORDS, prompts=QUERIES):
    given = (torch.tensor([1.0, 2.0, 3.0]),) * len(seen)
    return finished(None if prompts is None else torch.tensor(prompts), scores=given, scored_texts=tuple(seen),
                    tokenizer=tokenizer)  # fmt: skip


RIGHT_TEXTS = (["w3 w3", "w5 w6", "w7 w8"], ["w4", "w4 w5 w6 w7", ""])


def test_a_reward_on_text_given_the_decoded_truncated_responses_keeps_its_scores():
    got = update_scores(text_run([RIGHT_TEXTS]), [update(rollout(RESPONSES))])
    assert got[0].tolist() == [1.0, 2.0, 3.0]


@pytest.mark.parametrize(
    ("prompts", "texts", "says"),
    [
        (RIGHT_TEXTS[0], ["w4 [EOS]", "w4 w5 w6 w7", ""], "given response 0 as 'w4 [EOS]'"),  # special tokens kept
        (RIGHT_TEXTS[0], ["w4 w7 w7", "w4 w5 w6 w7", ""], "decodes to 'w4'"),  # not truncated after the stop
        (RIGHT_TEXTS[0], ["w4 w5 w6 w7", "w4", ""], "given response 0"),  # rows out of order
        (RIGHT_TEXTS[0], ["w4", "w4 w5 w6 w7"], "2 responses for 3 rollout rows"),
        (RIGHT_TEXTS[1], RIGHT_TEXTS[1], "which decodes none of the run's prompts"),  # responses as prompts
        (["[PAD] w3 w3", "w5 w6", "w7 w8"], RIGHT_TEXTS[1], "'[PAD] w3 w3'"),
    ],
)
def test_a_reward_on_text_given_other_strings_leaves_the_scores_unknown(prompts, texts, says):
    got = update_scores(text_run([(prompts, texts)]), [update(rollout(RESPONSES))])
    assert isinstance(got[0], Unscored) and says in got[0].reason


def test_a_reward_on_text_without_a_tokenizer_or_prompts_or_calls_is_not_trusted():
    ups = [update(rollout(RESPONSES))]
    assert "no `tokenizer`" in update_scores(text_run([RIGHT_TEXTS], tokenizer=None), ups)[0].reason
    assert "not the prompts" in update_scores(text_run([RIGHT_TEXTS], prompts=None), ups)[0].reason
    assert "called 2 times in 1 updates" in update_scores(text_run([RIGHT_TEXTS] * 2), ups)[0].reason
