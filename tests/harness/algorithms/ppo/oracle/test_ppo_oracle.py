"""The oracle against slow, obviously-correct loops, and end to end on a tiny fake trainer.

Covers the algorithm-neutral blocks (`harness.oracle`: masks, row pairing, pooling,
expectations), the PPO view and expectations (`harness.algorithms.ppo.view` / `.expect`),
and `harness.compare` with the tolerance table.
"""

from __future__ import annotations

import importlib.util
import math
import statistics
import textwrap
from dataclasses import dataclass, replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.algorithms.ppo.contract import POOLED_NAMES, POOLED_STATS, RATIO_VAR, ROLLOUT, SiteMap
from harness.algorithms.ppo.oracle.expect import expected_metrics, pooled_expectations, rollout_expectations
from harness.algorithms.ppo.tolerances import TOLERANCES
from harness.algorithms.ppo.view import UpdateView, build_view
from harness.compare import compare
from harness.errors import HarnessConfigError, NotRecomputable
from harness.instrument.records import LogProbCall, Mark, MaskedMeanCall, Site
from harness.instrument.spy import Spy
from harness.oracle.masks import derive_masks, first_true, mask_difference
from harness.oracle.pairing import Rows, map_rows
from harness.oracle.pooling import Expectation, Pooled
from harness.tolerances import Tolerance, close, tolerance
from harness.verdict import MetricStatus

PAD, STOP = 0, 1

# ---------------------------------------------------------------------------- slow references


def slow_masks(row: list[int], stop: int | None, pad: int) -> tuple[list[bool], list[bool]]:
    """R and V of one response, by scanning it token by token."""
    width = len(row)
    truncated = list(row)
    if stop is not None and stop in truncated:
        cut = truncated.index(stop)
        truncated = truncated[: cut + 1] + [pad] * (width - cut - 1)
    first_pad = truncated.index(pad) if pad in truncated else width
    last = first_pad - 1
    return [t <= last for t in range(width)], [t <= last + 1 for t in range(width)]


@dataclass
class SlowMicro:
    rows: list[int]
    new: list[list[float]]
    entropy: list[list[float]]
    pg: list[list[float]]
    pg_clip: list[list[float]]
    vf: list[list[float]]
    vf_clip: list[list[float]]


def slow_pooled(responses, old, micros: list[SlowMicro], stop, pad) -> dict[str, float | None]:
    """The metrics.md definitions written as plain loops over micro-batches, rows and tokens."""
    sums = dict.fromkeys(["pg", "pgc", "vf", "vfc", "kl", "ent", "ratio"], 0.0)
    count_r = count_v = 0
    ratio_means = []
    for micro in micros:
        mb_ratio, mb_count = 0.0, 0
        for j, row in enumerate(micro.rows):
            r_mask, v_mask = slow_masks(responses[row], stop, pad)
            for t in range(len(r_mask)):
                if r_mask[t]:
                    diff = micro.new[j][t] - old[row][t]
                    sums["pg"] += micro.pg[j][t]
                    sums["pgc"] += micro.pg_clip[j][t]
                    sums["kl"] += 0.5 * diff * diff
                    sums["ent"] += micro.entropy[j][t]
                    sums["ratio"] += math.exp(diff)
                    mb_ratio += math.exp(diff)
                    mb_count += 1
                if v_mask[t]:
                    sums["vf"] += 0.5 * micro.vf[j][t]
                    sums["vfc"] += micro.vf_clip[j][t]
                    count_v += 1
        count_r += mb_count
        if mb_count:
            ratio_means.append(mb_ratio / mb_count)

    def mean(key: str, count: int) -> float | None:
        return sums[key] / count if count else None

    return {
        "loss/policy_avg": mean("pg", count_r),
        "policy/clipfrac_avg": mean("pgc", count_r),
        "loss/value_avg": mean("vf", count_v),
        "val/clipfrac_avg": mean("vfc", count_v),
        "policy/approxkl_avg": mean("kl", count_r),
        "policy/entropy_avg": mean("ent", count_r),
        "val/ratio": mean("ratio", count_r),
        "val/ratio_var": statistics.variance(ratio_means) if len(ratio_means) >= 2 else 0.0,
    }


# ---------------------------------------------------------------------------- hand-built records

_seq = iter(range(10**9))


def slsm(name: str, index, logprobs, entropy=None) -> LogProbCall:
    index = torch.as_tensor(index, dtype=torch.int64)
    logprobs = torch.as_tensor(logprobs, dtype=torch.float64)
    entropy = torch.zeros_like(logprobs) if entropy is None else torch.as_tensor(entropy, dtype=torch.float64)
    site = Site("fake.py", "f", name)
    return LogProbCall(site, next(_seq), index=index, logprobs=logprobs, entropy=entropy, dtype="float64")


def mm(name: str, values, mask) -> MaskedMeanCall:
    values = torch.as_tensor(values, dtype=torch.float64)
    mask = torch.as_tensor(mask, dtype=torch.bool)
    result = torch.where(mask, values, 0.0).sum() / mask.sum()
    site = Site("fake.py", "f", name)
    return MaskedMeanCall(site, next(_seq), values=values, mask=mask, result=result, dtype="float64")


def updates_of(records, sites: SiteMap | None = None) -> list[UpdateView]:
    """The update views of `records` (what `oracle.split_updates` gave)."""
    return list(build_view(records, STOP, PAD, sites).updates)


def rows_of(update: UpdateView) -> tuple[Rows, list[Rows]]:
    """The rollout rows and each micro-batch's rows of an update, as the row pairing reads them."""
    rollout = update.rollout
    whole = Rows(rollout.responses, rollout.logprobs, rollout.entropy, rollout.response_mask)
    micro = [Rows(mb.responses, mb.record.logprobs, mb.record.entropy, mb.response_mask) for mb in update.micro_batches]
    return whole, micro


@st.composite
def synthetic_runs(draw):
    """Random rollouts (unique responses with stops and pads) and micro-batch splits over 1-2 epochs."""
    width = draw(st.integers(1, 6))
    n = draw(st.integers(1, 8))
    row = st.lists(st.integers(0, 4), min_size=width, max_size=width)
    responses = draw(st.lists(row, min_size=n, max_size=n, unique_by=tuple))
    epochs = draw(st.integers(1, 2))
    order = [row for _ in range(epochs) for row in draw(st.permutations(range(n)))]
    sizes = []
    while sum(sizes) < len(order):
        sizes.append(draw(st.integers(1, len(order) - sum(sizes))))
    return responses, order, sizes, draw(st.integers(0, 2**31 - 1))


def build(responses, order, sizes, seed):
    """Records of one update (rollout in chunks of 3, then micro-batches) and the same data for loops."""
    gen = torch.Generator().manual_seed(seed)
    n, width = len(responses), len(responses[0])
    old = -3 * torch.rand(n, width, generator=gen, dtype=torch.float64)
    ref = old + 0.1 * torch.randn(n, width, generator=gen, dtype=torch.float64)
    records = []
    for start in range(0, n, 3):
        records.append(slsm("logprob", responses[start : start + 3], old[start : start + 3]))
        records.append(slsm("ref_logprob", responses[start : start + 3], ref[start : start + 3]))
        records.append(mm("mean", old[start : start + 3], torch.ones(min(3, n - start), width)))  # ignored
    micros, start = [], 0
    for size in sizes:
        rows = order[start : start + size]
        start += size
        micro, tensors = random_micro(rows, old, gen)
        r_mask, v_mask = derive_masks(torch.tensor([responses[i] for i in rows]), STOP, PAD)
        index = [responses[i] for i in rows]
        records.append(slsm("new_logprobs", index, tensors["new"], tensors["entropy"]))
        records.append(mm("pg_loss", tensors["pg"], r_mask))
        records.append(mm("pg_clipfrac", tensors["pg_clip"], r_mask))
        records.append(mm("vf_loss", tensors["vf"], v_mask))
        records.append(mm("vf_clipfrac", tensors["vf_clip"], v_mask))
        micros.append(micro)
    return records, old.tolist(), micros


def random_micro(rows: list[int], old: torch.Tensor, gen: torch.Generator):
    shape = (len(rows), old.shape[1])
    tensors = {
        "new": old[rows] + 0.3 * torch.randn(shape, generator=gen, dtype=torch.float64),
        "entropy": 2 * torch.rand(shape, generator=gen, dtype=torch.float64),
        "pg": torch.randn(shape, generator=gen, dtype=torch.float64),
        "pg_clip": (torch.rand(shape, generator=gen) > 0.5).double(),
        "vf": 5 * torch.rand(shape, generator=gen, dtype=torch.float64),
        "vf_clip": (torch.rand(shape, generator=gen) > 0.5).double(),
    }
    slow = SlowMicro(rows, *(tensors[k].tolist() for k in ("new", "entropy", "pg", "pg_clip", "vf", "vf_clip")))
    return slow, tensors


# ---------------------------------------------------------------------------- masks


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(st.lists(st.integers(0, 4), min_size=5, max_size=5), min_size=1, max_size=6),
    stop=st.sampled_from([STOP, None, PAD]),
)
def test_derive_masks_matches_token_scan(rows, stop):
    response_mask, value_mask = derive_masks(torch.tensor(rows), stop, PAD)
    for i, row in enumerate(rows):
        want_r, want_v = slow_masks(row, stop, PAD)
        assert response_mask[i].tolist() == want_r
        assert value_mask[i].tolist() == want_v


def test_derive_masks_examples():
    responses = torch.tensor([[5, 6, 1, 7, 8], [5, 0, 0, 0, 0], [5, 6, 7, 8, 9], [0, 0, 0, 0, 0], [1, 5, 5, 5, 5]])
    response_mask, value_mask = derive_masks(responses, STOP, PAD)
    assert response_mask.sum(1).tolist() == [3, 1, 5, 0, 1]
    assert value_mask.sum(1).tolist() == [4, 2, 5, 1, 2]


def test_first_true_and_mask_difference():
    flags = torch.tensor([[False, True, True], [False, False, False], [True, False, False]])
    assert first_true(flags).tolist() == [1, 3, 0]
    want = torch.tensor([[True, True, False], [True, False, False]])
    assert mask_difference(want.clone(), want) is None
    got = want.clone()
    got[1, 2] = got[0, 2] = True
    assert mask_difference(got, want) == "differs at 2 positions (first: row 0, t=2) from"
    assert mask_difference(want[:, :2], want) == "of shape (2, 2) does not match the shape (2, 3) of"


# ---------------------------------------------------------------------------- pooled formulas


@settings(max_examples=150, deadline=None)
@given(synthetic_runs())
def test_pooled_means_match_slow_loops(run):
    responses, order, sizes, seed = run
    records, old, micros = build(responses, order, sizes, seed)
    (update,) = updates_of(records)
    assert update.geometry == sizes
    assert update.mask_problems() == []
    got = pooled_expectations([update])
    want = slow_pooled(responses, old, micros, STOP, PAD)
    assert set(got) == set(want) == set(POOLED_STATS)
    for name, value in want.items():
        assert got[name].metric == name
        if value is None:  # the slow loop has nothing to average: the convention is 0, with the reason
            assert got[name].value == 0.0
            assert "no R-active" in got[name].reason or "no V-active" in got[name].reason
        else:
            assert got[name].value == pytest.approx(value, rel=1e-9, abs=1e-12), name
        # the sums and counts behind each pooled value are kept, one per micro-batch
        assert len(got[name].pooled.counts) == len(sizes), name
    for name in POOLED_NAMES:
        assert got[name].value == got[name].pooled.token_mean() and got[name].count == got[name].pooled.count
    assert got[RATIO_VAR].value == got["val/ratio"].pooled.variance_of_part_means()


def test_values_outside_the_masks_do_not_matter():
    responses = [[5, 6, 1, 0], [5, 0, 0, 0], [7, 7, 7, 7]]
    records, _, _ = build(responses, [0, 1, 2], [2, 1], seed=3)
    clean = pooled_expectations(updates_of(records))
    poisoned_records = [
        replace(record, values=torch.where(~record.mask, float("nan"), record.values))
        if record.fn == "masked_mean" and record.site.name in ("pg_loss", "vf_loss")
        else record
        for record in records
    ]
    assert sum(r is not p for r, p in zip(records, poisoned_records)) == 4  # two sites in each of two micro-batches
    poisoned = pooled_expectations(updates_of(poisoned_records))
    for name in clean:
        assert poisoned[name].value == pytest.approx(clean[name].value, rel=1e-12), name


def test_zero_count_micro_batch_adds_nothing():
    responses = [[5, 6, 1, 0], [0, 0, 0, 0], [7, 7, 7, 7], [8, 1, 0, 0]]
    records, old, micros = build(responses, [0, 2, 1, 3], [2, 1, 1], seed=5)
    (update,) = updates_of(records)
    assert update.empty_micro_batches() == [1]
    got = pooled_expectations([update])
    want = slow_pooled(responses, old, micros, STOP, PAD)
    assert got["val/ratio_var"].count == 2  # the empty micro-batch is not a ratio sample
    for name, value in want.items():
        assert got[name].value == pytest.approx(value, rel=1e-12), name
    assert all(math.isfinite(e.value) for e in got.values())


def test_ratio_var_is_zero_with_one_micro_batch():
    records, _, _ = build([[5, 6, 1, 0], [7, 7, 7, 7]], [0, 1], [2], seed=1)
    got = pooled_expectations(updates_of(records))
    assert got["val/ratio_var"].value == 0.0
    assert got["val/ratio"].value != 1.0


def test_all_masked_update_expects_zero_not_nan():
    records, _, _ = build([[0, 0, 0], [PAD, 5, 5]], [0, 1], [1, 1], seed=1)
    got = pooled_expectations(updates_of(records))
    assert got["loss/policy_avg"].value == 0.0 and "no R-active" in got["loss/policy_avg"].reason
    assert got["loss/value_avg"].value is not None  # V still holds position 0 of each row
    assert got["val/ratio_var"].value == 0.0


def test_pooled_sums_and_counts():
    values = torch.tensor([[1.0, 2.0, 100.0], [3.0, 4.0, 5.0]], dtype=torch.float64)
    masks = [torch.tensor([[True, True, False]]), torch.tensor([[False, False, False]]), torch.tensor([[True] * 3])]
    pooled = Pooled.of([(values[:1], masks[0]), (values[:1], masks[1]), (values[1:], masks[2])])
    assert pooled == Pooled((3.0, 0.0, 12.0), (2, 0, 3), (3.0, 0.0, 12.0)) and pooled.count == 5
    assert pooled.scale == 15.0 / 5  # mean |value| per token
    signed = Pooled.of([(-values[:1], masks[0]), (values[1:], masks[2])])
    assert signed.numerators == (-3.0, 12.0) and signed.magnitudes == (3.0, 12.0) and signed.scale == 3.0
    assert pooled.token_mean() == 15.0 / 5
    assert pooled.part_means() == [1.5, 4.0]  # the empty part is no sample
    assert pooled.variance_of_part_means() == pytest.approx(statistics.variance([1.5, 4.0]), rel=1e-15)
    empty = Pooled.of([(values[:1], masks[1])])
    assert (empty.token_mean(), empty.part_means(), empty.variance_of_part_means()) == (0.0, [], 0.0)
    assert Pooled.of([(values[:1], masks[0])]).variance_of_part_means() == 0.0


# ---------------------------------------------------------------------------- grouping


def test_split_updates_on_logprob_after_training_and_on_marks():
    first, _, _ = build([[5, 1, 0], [6, 6, 6]], [0, 1], [1, 1], seed=1)
    second, _, _ = build([[7, 1, 0], [8, 8, 8]], [1, 0], [2], seed=2)
    mark = Mark(Site("<mark>", "<mark>", "third"), next(_seq), label="third")
    third, _, _ = build([[9, 1, 0]], [0], [1], seed=3)
    records = first + second + [mark] + third
    run = build_view(records, STOP, PAD)
    updates = run.updates
    assert [u.geometry for u in updates] == [[1, 1], [2], [1]]
    # an update no longer carries the mark's label: the mark is where it starts
    assert [u.index for u in updates] == [0, 1, 2] and updates[2].start_seq == mark.seq
    assert updates[1].rollout.responses.tolist() == [[7, 1, 0], [8, 8, 8]]
    assert all(len(u.ignored) >= 1 for u in updates)  # the "mean" sites
    assert run.starts == (0, len(first), len(first) + len(second))
    # an event at the position where an update's first record lands happened before that update
    assert [run.update_at(c) for c in (0, len(first), len(first) + 1, len(records))] == [0, 0, 1, 2]


def test_custom_site_map():
    records, _, _ = build([[5, 1, 0], [6, 6, 6]], [0, 1], [2], seed=1)
    records = [
        replace(record, site=Site("fake.py", "f", "policy_loss")) if record.site.name == "pg_loss" else record
        for record in records
    ]
    default = updates_of(records)[0]
    assert "pg_loss" not in default.micro_batches[0].sites
    custom = updates_of(records, SiteMap(pg_loss="policy_loss"))[0]
    assert len(custom.micro_batches[0].sites["pg_loss"]) == 1


def test_stray_micro_batch_sites_are_reported():
    records, _, _ = build([[5, 1, 0], [6, 6, 6]], [0, 1], [2], seed=1)
    stray = replace(mm("vf_loss", torch.ones(2, 3), torch.ones(2, 3)), seq=records[0].seq - 1)  # before the rollout
    (update,) = updates_of([stray] + records)
    assert update.stray == (stray,)
    assert any("before any 'new_logprobs'" in p for p in update.mask_problems())


# ---------------------------------------------------------------------------- what cannot be recomputed


def test_identical_responses_are_not_recomputable():
    records, _, _ = build([[5, 1, 0], [5, 1, 0], [6, 6, 6]], [0, 1, 2], [2, 1], seed=1)
    (update,) = updates_of(records)
    with pytest.raises(NotRecomputable, match=r"rows \[0, 1\] have identical responses"):
        map_rows(*rows_of(update), where="update 0")
    for micro in update.micro_batches:  # the view keeps why, and the log-ratio raises it
        assert micro.old_logprobs is None and "identical responses" in micro.old_problem
        with pytest.raises(NotRecomputable, match=r"rows \[0, 1\] have identical responses"):
            micro.log_ratio()
    got = expected_metrics(update, 0.05, "k1")
    for name in ("policy/approxkl_avg", "val/ratio", "val/ratio_var"):
        assert got[name].value is None and "identical responses" in got[name].reason
    assert got["loss/policy_avg"].value is not None  # what needs no row mapping is still checked
    results = {r.name: r for r in compare({n: 0.0 for n in got}, got, "float64", TOLERANCES)}
    assert results["val/ratio"].status == "not_recomputable" and results["val/ratio"].failed


def test_missing_site_is_not_recomputable_with_a_reason():
    records, _, _ = build([[5, 1, 0], [6, 6, 6]], [0, 1], [1, 1], seed=1)
    vf_loss_records = [r for r in records if r.site.name == "vf_loss"]
    records = [r for r in records if r is not vf_loss_records[1]]
    got = expected_metrics(updates_of(records), 0.05, "k1")
    assert got["loss/value_avg"].value is None
    assert "micro-batch 1" in got["loss/value_avg"].reason and "'vf_loss'" in got["loss/value_avg"].reason
    assert got["val/clipfrac_avg"].value is not None


def test_no_records_gives_reasons_not_silence():
    got = expected_metrics([], 0.05, "k1")
    assert set(got) == set(POOLED_STATS) | set(ROLLOUT)
    assert all(e.value is None and e.reason for e in got.values())


def test_check_masks_flags_the_wrong_mask():
    records, _, _ = build([[5, 1, 0, 0], [6, 6, 6, 6]], [0, 1], [2], seed=1)
    response_mask = derive_masks(torch.tensor([[5, 1, 0, 0], [6, 6, 6, 6]]), STOP, PAD)[0]
    records = [  # the response mask where the value mask belongs
        replace(record, mask=response_mask) if record.site.name == "vf_loss" else record for record in records
    ]
    (problem,) = updates_of(records)[0].mask_problems()
    assert "'vf_loss'" in problem and "V mask" in problem and "row 0, t=2" in problem


# ---------------------------------------------------------------------------- rollout objectives


@pytest.mark.parametrize("estimator", ["k1", "k3"])
def test_rollout_objectives_match_loops(estimator):
    responses = [[5, 6, 1, 0, 0], [7, 0, 0, 0, 0], [8, 8, 8, 8, 8], [0, 0, 0, 0, 0], [9, 1, 5, 5, 5]]
    records, _, _ = build(responses, [0, 1, 2, 3, 4], [3, 2], seed=11)
    (update,) = updates_of(records)
    old, ref = update.rollout.logprobs.tolist(), update.rollout.ref_logprobs.tolist()
    kl_rows, entropy_rows = [], []
    for i, response in enumerate(responses):
        r_mask, _ = slow_masks(response, STOP, PAD)
        kl, entropy = 0.0, 0.0
        for t, active in enumerate(r_mask):
            if active:
                log_r = ref[i][t] - old[i][t]
                kl += -log_r if estimator == "k1" else math.exp(log_r) - 1 - log_r
                entropy += -old[i][t]
        kl_rows.append(kl)
        entropy_rows.append(entropy)
    scores = [0.5, -1.0, 2.0, 0.0, 1.5]
    got = expected_metrics(update, 0.1, estimator, scores=scores)
    assert rollout_expectations([update], 0.1, estimator, scores) == {name: got[name] for name in ROLLOUT}
    kl_mean = sum(kl_rows) / len(responses)
    assert got["objective/kl"].value == pytest.approx(kl_mean, rel=1e-12)
    assert got["objective/entropy"].value == pytest.approx(sum(entropy_rows) / len(responses), rel=1e-12)
    assert got["objective/non_score_reward"].value == pytest.approx(-0.1 * kl_mean, rel=1e-12)
    assert got["objective/scores"].value == pytest.approx(sum(scores) / 5, rel=1e-12)
    assert got["objective/rlhf_reward"].value == pytest.approx(sum(scores) / 5 - 0.1 * kl_mean, rel=1e-12)


def test_scores_are_optional_and_counted():
    records, _, _ = build([[5, 1, 0], [6, 6, 6]], [0, 1], [2], seed=1)
    got = expected_metrics(updates_of(records), 0.05, "k1")
    assert got["objective/scores"].value is None and not got["objective/scores"].required
    wrong = expected_metrics(updates_of(records), 0.05, "k1", scores=[1.0])
    assert wrong["objective/scores"].required and "1 scores" in wrong["objective/scores"].reason
    with pytest.raises(HarnessConfigError, match="kl_estimator"):
        expected_metrics(updates_of(records), 0.05, "k2")


def test_two_ranks_pool_sums_and_counts():
    a, old_a, micros_a = build([[5, 1, 0, 0], [6, 6, 6, 6]], [0, 1], [2], seed=1)
    b, old_b, micros_b = build([[7, 0, 0, 0], [8, 8, 1, 0], [9, 9, 9, 9]], [2, 0, 1], [2, 1], seed=2)
    got = pooled_expectations(updates_of(a) + updates_of(b))
    responses_a, responses_b = [[5, 1, 0, 0], [6, 6, 6, 6]], [[7, 0, 0, 0], [8, 8, 1, 0], [9, 9, 9, 9]]
    # one rank's rows, offset: both ranks' data in one slow run
    shifted = [SlowMicro([r + 2 for r in m.rows], m.new, m.entropy, m.pg, m.pg_clip, m.vf, m.vf_clip)
               for m in micros_b]  # fmt: skip
    want = slow_pooled(responses_a + responses_b, old_a + old_b, micros_a + shifted, STOP, PAD)
    for name, value in want.items():
        assert got[name].value == pytest.approx(value, rel=1e-12), name


# ---------------------------------------------------------------------------- compare and tolerances


def test_compare_statuses():
    expected = {
        "val/ratio": Expectation("val/ratio", 1.0),
        "loss/policy_avg": Expectation("loss/policy_avg", 0.5),
        "val/ratio_var": Expectation("val/ratio_var", 0.0),
        "policy/entropy_avg": Expectation("policy/entropy_avg", 2.0),
        "objective/kl": Expectation.unknown("objective/kl", "no records"),
        "objective/scores": Expectation.unknown("objective/scores", "no scores", required=False),
        "objective/entropy": Expectation("objective/entropy", float("nan")),
    }
    logged = {
        "val/ratio": 1.0 + 1e-7,
        "loss/policy_avg": 0.6,
        "val/ratio_var": float("nan"),
        "objective/kl": 0.1,
        "objective/scores": 1.0,
        "objective/entropy": 3.0,
    }
    results = {r.name: r for r in compare(logged, expected, "float32", TOLERANCES)}
    status = {name: r.status for name, r in results.items()}
    assert status == {
        "val/ratio": "pass",
        "loss/policy_avg": "fail",
        "val/ratio_var": "nan",
        "policy/entropy_avg": "missing",
        "objective/kl": "not_recomputable",
        "objective/scores": "not_recomputable",
        "objective/entropy": "nan",
    }
    assert all(isinstance(r.status, MetricStatus) for r in results.values())
    assert [n for n, r in results.items() if not r.failed] == ["val/ratio", "objective/scores"]
    fail = results["loss/policy_avg"]
    assert fail.abs_err == pytest.approx(0.1) and fail.rel_err == pytest.approx(0.2)
    assert fail.tol == pytest.approx(tolerance("loss/policy_avg", "float32", TOLERANCES).allowed(0.5))
    assert fail.where is None and fail.label == "loss/policy_avg"
    assert results["objective/kl"].reason == "no records" and not results["objective/scores"].required


def test_compare_plain_numbers_and_where():
    # labels are no longer put into metric names: `where` says which comparison it is
    results = compare({"val/ratio": 0.6667}, {"val/ratio": 1.0}, torch.float32, TOLERANCES, kind="partition",
                      where="bs=2")  # fmt: skip
    (result,) = results
    assert result.status == "fail" and result.reason.startswith("partition:")
    assert (result.name, result.where, result.label) == ("val/ratio", "bs=2", "val/ratio @ bs=2")
    own_row = tolerance("val/ratio", "float32", TOLERANCES)  # val/ratio's own row
    assert result.tol == pytest.approx(own_row.allowed(1.0))
    (inf,) = compare({"val/ratio": float("inf")}, {"val/ratio": 1.0}, "float32", TOLERANCES)
    assert inf.status == "nan" and inf.failed


@given(
    x=st.floats(allow_nan=True, allow_infinity=True),
    y=st.floats(allow_nan=True, allow_infinity=True),
)
def test_close_is_never_true_for_non_finite(x, y):
    if not (math.isfinite(x) and math.isfinite(y)):
        assert not close(x, y, Tolerance(1e300, 1e300))
    elif math.isfinite(abs(x - y)):
        assert close(x, y, (abs(x - y), 0.0))
        assert close(x, y, (0.0, 0.0)) == (x == y)


def test_tolerance_table():
    for metric in POOLED_STATS + ROLLOUT:
        f64, f32, bf16 = (tolerance(metric, d, TOLERANCES) for d in ("float64", "float32", "bfloat16"))
        assert f64.abs_tol <= f32.abs_tol <= bf16.abs_tol and f64.rel_tol <= f32.rel_tol <= bf16.rel_tol
        assert f32.rel_tol < 1e-3 or metric == "val/ratio_var"
    assert tolerance("unknown/metric", torch.float32, TOLERANCES) == tolerance("*", "float32", TOLERANCES)
    half, brain = (tolerance("val/ratio", d, TOLERANCES) for d in ("float16", "bfloat16"))
    assert half == brain  # bfloat16's bounds float16's
    with pytest.raises(HarnessConfigError, match="float8"):
        tolerance("val/ratio", "float8_e4m3fn", TOLERANCES)


# ---------------------------------------------------------------------------- end to end on a fake trainer

FAKE_TRAINER = """
import torch


def masked_mean(values, mask, axis=None):
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum()


def selective_log_softmax(logits, index):
    return torch.gather(logits.log_softmax(-1), -1, index.unsqueeze(-1)).squeeze(-1)


def trainer_masks(responses, stop, pad):
    width = responses.shape[1]
    positions = torch.arange(width)
    is_stop = responses == stop
    first = torch.where(is_stop.any(1), is_stop.int().argmax(1), width)
    truncated = torch.where(positions > first[:, None], pad, responses)
    is_pad = truncated == pad
    length = torch.where(is_pad.any(1), is_pad.int().argmax(1), width) - 1
    return positions <= length[:, None], positions <= length[:, None] + 1


def rollout(batch, kl_coef, stop, pad, chunk=5):
    logprobs, ref_logprobs = [], []
    for start in range(0, len(batch["responses"]), chunk):
        response = batch["responses"][start : start + chunk]
        logprob = selective_log_softmax(batch["logits"][start : start + chunk], response)
        ref_logprob = selective_log_softmax(batch["ref_logits"][start : start + chunk], response)
        logprobs.append(logprob)
        ref_logprobs.append(ref_logprob)
    logprobs, ref_logprobs = torch.cat(logprobs), torch.cat(ref_logprobs)
    r_mask, v_mask = trainer_masks(batch["responses"], stop, pad)
    kl = torch.where(r_mask, logprobs - ref_logprobs, 0.0)
    stats = {
        "objective/kl": kl.sum(1).mean(),
        "objective/entropy": torch.where(r_mask, -logprobs, 0.0).sum(1).mean(),
        "objective/non_score_reward": (-kl_coef * kl).sum(1).mean(),
        "objective/scores": batch["scores"].mean(),
    }
    stats["objective/rlhf_reward"] = stats["objective/non_score_reward"] + stats["objective/scores"]
    return logprobs, r_mask, v_mask, stats


def micro_batch(batch, mb, logprobs, r_mask, v_mask, epoch, clip=0.2):
    new_logits = batch["logits"][mb] + (epoch + 1) * batch["drift"][mb]
    new_logprobs = selective_log_softmax(new_logits, batch["responses"][mb])
    probs = new_logits.softmax(-1)
    entropy = torch.logsumexp(new_logits, -1) - (probs * new_logits).sum(-1)
    diff = new_logprobs - logprobs[mb]
    ratio = diff.exp()
    adv = batch["advantages"][mb]
    pg_losses, pg_losses2 = -adv * ratio, -adv * ratio.clamp(1 - clip, 1 + clip)
    pg_loss = masked_mean(torch.max(pg_losses, pg_losses2), r_mask[mb])
    pg_clipfrac = masked_mean((pg_losses2 > pg_losses).to(ratio.dtype), r_mask[mb])
    old_v, returns = batch["values"][mb], batch["returns"][mb]
    vpred = old_v + batch["value_drift"][mb]
    vclipped = old_v + (vpred - old_v).clamp(-clip, clip)
    vf_losses1, vf_losses2 = (vpred - returns) ** 2, (vclipped - returns) ** 2
    vf_loss = 0.5 * masked_mean(torch.max(vf_losses1, vf_losses2), v_mask[mb])
    vf_clipfrac = masked_mean((vf_losses2 > vf_losses1).to(ratio.dtype), v_mask[mb])
    token = {
        "loss/policy_avg": torch.max(pg_losses, pg_losses2),
        "policy/clipfrac_avg": (pg_losses2 > pg_losses).to(ratio.dtype),
        "loss/value_avg": 0.5 * torch.max(vf_losses1, vf_losses2),
        "val/clipfrac_avg": (vf_losses2 > vf_losses1).to(ratio.dtype),
        "policy/approxkl_avg": 0.5 * diff**2,
        "policy/entropy_avg": entropy,
        "val/ratio": ratio,
    }
    means = {"loss/policy_avg": pg_loss, "policy/clipfrac_avg": pg_clipfrac, "loss/value_avg": vf_loss,
             "val/clipfrac_avg": vf_clipfrac}
    return token, means


VALUE_METRICS = ("loss/value_avg", "val/clipfrac_avg")


def train(batch, pooling="pooled", bs=4, gas=3, mini_batches=2, epochs=1, kl_coef=0.05, stop=1, pad=0):
    logprobs, r_mask, v_mask, stats = rollout(batch, kl_coef, stop, pad)
    n = len(batch["responses"])
    mini = n // mini_batches
    sums, counts, ratio_means, mean_lists = {}, {}, [], {}
    for epoch in range(epochs):
        order = torch.randperm(n, generator=torch.Generator().manual_seed(epoch))
        for m in range(mini_batches):
            inds = order[m * mini : (m + 1) * mini]
            for start in range(0, mini, bs):
                mb = inds[start : start + bs]
                token, means = micro_batch(batch, mb, logprobs, r_mask, v_mask, epoch)
                for name, values in token.items():
                    active = v_mask[mb] if name in VALUE_METRICS else r_mask[mb]
                    total = torch.where(active, values, 0.0).sum()
                    sums[name] = sums.get(name, 0.0) + total
                    counts[name] = counts.get(name, 0) + active.sum()
                    mean_lists.setdefault(name, []).append(total / active.sum())
                ratio_means.append(mean_lists["val/ratio"][-1])
    if pooling == "pooled":
        stats.update({name: sums[name] / counts[name] for name in sums})
    else:
        stats.update({name: torch.stack(values).mean() for name, values in mean_lists.items()})
    stats["val/ratio_var"] = torch.stack(ratio_means).var()
    return {name: float(value) for name, value in stats.items()}
"""


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    path = tmp_path_factory.mktemp("fake") / "fake_trainer.py"
    path.write_text(textwrap.dedent(FAKE_TRAINER))
    spec = importlib.util.spec_from_file_location("fake_trainer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_batch(dtype: torch.dtype, n: int = 12, width: int = 8, vocab: int = 11, seed: int = 0) -> dict:
    """Unique responses of many lengths (stop then pad, as generate returns them) and random tensors."""
    gen = torch.Generator().manual_seed(seed)
    responses = torch.randint(2, vocab, (n, width), generator=gen)
    stops = [0, 3, 5, 7, None, 2, 6, 1, 4, None, 2, 5]  # None: the response never stops
    for row in range(n):
        stop_at = stops[row % len(stops)]
        if stop_at is not None:
            responses[row, stop_at] = STOP
            responses[row, stop_at + 1 :] = PAD
    assert len({tuple(r) for r in responses.tolist()}) == n

    def rand(*shape, scale=1.0):
        return (scale * torch.randn(*shape, generator=gen, dtype=torch.float64)).to(dtype)

    return {
        "responses": responses,
        "logits": rand(n, width, vocab, scale=2.0),
        "ref_logits": rand(n, width, vocab, scale=2.0),
        "drift": rand(n, width, vocab, scale=0.3),
        "advantages": rand(n, width),
        "values": rand(n, width),
        "value_drift": rand(n, width, scale=0.3),
        "returns": rand(n, width),
        "scores": rand(n),
    }


def run_fake(fake, dtype, pooling, **geometry):
    batch = fake_batch(dtype)
    with Spy(fake) as spy:
        logs = fake.train(batch, pooling=pooling, **geometry)
    updates = updates_of(spy.records)
    assert len(updates) == 1
    expected = expected_metrics(updates[0], 0.05, "k1", scores=batch["scores"])
    return updates[0], compare(logs, expected, str(dtype), TOLERANCES), spy


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("epochs", [1, 2])
def test_fake_trainer_with_correct_pooling_passes(fake, dtype, epochs):
    update, results, spy = run_fake(fake, dtype, "pooled", epochs=epochs)
    assert update.geometry == [4, 2, 4, 2] * epochs
    assert update.mask_problems() == []
    rollout_calls = [len(spy.calls("selective_log_softmax", name=n)) for n in ("logprob", "ref_logprob")]
    assert rollout_calls == [3, 3]  # chunks of 5, 5, 2
    assert update.rollout.samples == 12 and update.rollout.ref_problem is None
    assert update.rollout.ref_logprobs.shape == update.rollout.logprobs.shape == (12, 8)
    failed = [f"{r.name}: {r.status} {r.logged} vs {r.expected} ({r.reason})" for r in results if r.failed]
    assert failed == []
    assert {r.name for r in results} == set(POOLED_STATS) | set(ROLLOUT)


def test_fake_trainer_mean_of_means_is_flagged(fake):
    update, results, _ = run_fake(fake, torch.float32, "mean_of_means")
    status = {r.name: r.status for r in results}
    flagged = {name for name, s in status.items() if s == "fail"}
    assert {
        "loss/policy_avg",
        "loss/value_avg",
        "policy/entropy_avg",
        "policy/approxkl_avg",
        "val/ratio",
    } <= flagged
    assert all(status[name] == "pass" for name in ROLLOUT)
    assert status["val/ratio_var"] == "pass"  # computed the same way in both poolings


def test_mean_of_means_is_flagged_even_with_equal_micro_batches(fake):
    # micro-batches of 3 rows each: the token counts still differ through padding
    _, results, _ = run_fake(fake, torch.float64, "mean_of_means", bs=3, gas=2, mini_batches=2)
    assert any(r.status == "fail" for r in results if r.name in POOLED_STATS)


def test_identical_responses_are_told_apart_by_their_entropies():
    """Two prompts can yield the same response; the per-token entropies (prompt-dependent) tell them apart."""
    responses = [[5, 1, 0], [5, 1, 0], [6, 6, 6]]
    old = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.7, -0.9], [-1.1, -1.2, -1.3]], dtype=torch.float64)
    rollout_entropy = torch.tensor([[1.0, 2.0, 0.0], [3.0, 1.5, 0.0], [2.0, 2.0, 2.0]], dtype=torch.float64)
    records = [slsm("logprob", responses, old, rollout_entropy), slsm("ref_logprob", responses, old)]
    # one micro-batch holding rollout rows 1 then 0, with entropies that drifted a little
    records.append(slsm("new_logprobs", [responses[1], responses[0]], old[[1, 0]], rollout_entropy[[1, 0]] + 0.01))
    (update,) = updates_of(records)
    (mapping,) = map_rows(*rows_of(update), where="update 0")
    assert mapping.tolist() == [1, 0]
    (micro,) = update.micro_batches  # the view paired the rows the same way
    assert micro.old_problem is None and torch.equal(micro.old_logprobs, old[[1, 0]])
