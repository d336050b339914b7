"""Diagnoses: each candidate against a slow recomputation on hand-made records; made-up poolings get none."""

from __future__ import annotations

import statistics

import pytest
import torch

from harness.algorithms.ppo.contract import POOLED_MEANS
from harness.algorithms.ppo.oracle.expect import pooled
from harness.algorithms.ppo.tolerances import TOLERANCES
from harness.algorithms.ppo.view import MicroBatchView
from harness.algorithms.ppo.wrong.poolings import AccumulationSlots, candidates
from harness.diagnose import NO_MATCH, Candidate, diagnose
from harness.instrument.records import LogProbCall, MaskedMeanCall, Site
from harness.verdict import MetricStatus, MetricVerdict

T = 5
GEO = AccumulationSlots(slots=3, passes=2, per_pass=2)
LENGTHS = [[5, 3, 2, 4], [1, 3], [5, 5, 2, 0], [2, 4]]
"""Response lengths (R counts) of 4 micro-batches: two minibatches of 4+2 rows, 3 accumulation slots each."""


def micro(m: int, lengths: list[int], gen: torch.Generator) -> MicroBatchView:
    rows = len(lengths)
    r = torch.tensor([[t < n for t in range(T)] for n in lengths])
    v = torch.tensor([[t <= n for t in range(T)] for n in lengths])
    new, old = (
        torch.randn(rows, T, generator=gen, dtype=torch.float64),
        torch.randn(rows, T, generator=gen, dtype=torch.float64),
    )
    record = LogProbCall(
        Site("f", "g", "new_logprobs"),
        m,
        index=torch.zeros(rows, T, dtype=torch.long),
        logprobs=new,
        entropy=torch.rand(rows, T, generator=gen, dtype=torch.float64),
    )
    sites = {
        role: (
            MaskedMeanCall(
                Site("f", "g", role), m, values=torch.rand(rows, T, generator=gen, dtype=torch.float64), mask=mask
            ),
        )
        for role, mask in (("pg_loss", r), ("pg_clipfrac", r), ("vf_loss", v), ("vf_clipfrac", v))
    }
    return MicroBatchView(f"mb {m}", record, sites, r, v, old)  # fmt: skip


@pytest.fixture(scope="module")
def micros() -> list[MicroBatchView]:
    gen = torch.Generator().manual_seed(0)
    return [micro(m, lengths, gen) for m, lengths in enumerate(LENGTHS)]


def by_formula(name: str, micros, text: str, classes: tuple[int, ...]) -> float:
    found = [c for c in candidates(name, micros, GEO) if c.formula == text and c.classes == classes]
    assert len(found) == 1, [(c.classes, c.formula) for c in candidates(name, micros, GEO)]
    return found[0].value


def loop_masked(values, mask):
    total, count = 0.0, 0
    for i in range(values.shape[0]):
        for t in range(values.shape[1]):
            if mask[i, t]:
                total, count = total + float(values[i, t]), count + 1
    return total, count


def test_candidates_match_slow_recomputations(micros):
    entropy = [(mb.record.entropy, mb.response_mask) for mb in micros]
    sums = [loop_masked(e, r) for e, r in entropy]
    means = [s / c for s, c in sums]
    # class 1: equal-weight mean of the micro-batch means (the empty micro-batch would add nothing; none is empty)
    assert by_formula(
        "policy/entropy_avg", micros, "equal-weight mean of per-micro-batch token means", (1,)
    ) == pytest.approx(sum(means) / 4)
    # class 2: three slots per minibatch, two written: zeros in slots 3 and 6
    slotted = [means[0], means[1], 0.0, means[2], means[3], 0.0]
    text = (
        "mean over every accumulation slot (gradient_accumulation_steps per minibatch) of per-micro-batch token "
        "means, zeros in unwritten slots"
    )
    assert by_formula("policy/entropy_avg", micros, text, (2,)) == pytest.approx(sum(slotted) / 6)
    # class 11: the last micro-batch alone; class 10: divided by the accumulation steps
    assert by_formula(
        "policy/entropy_avg", micros, "last micro-batch's per-micro-batch token means", (11,)
    ) == pytest.approx(means[-1])
    total = sum(s for s, _ in sums) / sum(c for _, c in sums)
    assert by_formula("policy/entropy_avg", micros, "token mean / gradient_accumulation_steps", (10,)) == pytest.approx(
        total / 3
    )
    # class 5: every position counts, pads too (a plain mean over all T positions of every row)
    every = [float(e[i, t]) for e, _ in entropy for i in range(e.shape[0]) for t in range(T)]
    assert by_formula(
        "policy/entropy_avg", micros, "plain mean over every position of every micro-batch (pads included)", (5,)
    ) == pytest.approx(sum(every) / len(every))
    # class 4: the entropy one position late under R
    late = [sum(float(e[i, t + 1]) for i in range(e.shape[0]) for t in range(T - 1) if r[i, t]) for e, r in entropy]
    assert by_formula(
        "policy/entropy_avg", micros, "entropy summed over R one position late (t + 1), / |R|", (4,)
    ) == pytest.approx(sum(late) / sum(c for _, c in sums))
    # class 6: the value loss over R instead of V (0.5 outside masked_mean)
    vf = [loop_masked(0.5 * mb.sites["vf_loss"][0].values, mb.response_mask) for mb in micros]
    assert by_formula("loss/value_avg", micros, "token mean over the response mask R, not V", (6,)) == pytest.approx(
        sum(s for s, _ in vf) / sum(c for _, c in vf)
    )
    # class 3: policy loss means weighted by rows, over tokens
    pg = [loop_masked(mb.sites["pg_loss"][0].values, mb.response_mask) for mb in micros]
    weighted = sum(s / c * mb.rows for (s, c), mb in zip(pg, micros))
    assert by_formula(
        "loss/policy_avg", micros, "per-micro-batch means weighted by rows, / tokens", (3,)
    ) == pytest.approx(weighted / sum(c for _, c in pg))
    # val/ratio_var: biased variance, and the unbiased variance over the slots with zeros
    ratio = [loop_masked(torch.exp(mb.record.logprobs - mb.old_logprobs), mb.response_mask) for mb in micros]
    rmeans = [s / c for s, c in ratio]
    assert by_formula(
        "val/ratio_var", micros, "biased variance (ddof 0) of per-micro-batch token means", ()
    ) == pytest.approx(statistics.pvariance(rmeans))
    rslots = [rmeans[0], rmeans[1], 0.0, rmeans[2], rmeans[3], 0.0]
    text = "unbiased variance over every accumulation slot of per-micro-batch token means, zeros in unwritten slots"
    assert by_formula("val/ratio_var", micros, text, (2,)) == pytest.approx(statistics.variance(rslots))
    # class 5 + 2 with the sentinel: log-ratio 0 (ratio 1) outside R, plain means into the slots
    plain = [
        float(torch.where(mb.response_mask, torch.exp(mb.record.logprobs - mb.old_logprobs), 1.0).mean())
        for mb in micros
    ]
    text = (
        "mean over every accumulation slot (gradient_accumulation_steps per minibatch) of per-micro-batch plain "
        "means over every position, pads at log-ratio 0 (sentinel log-probs), zeros in unwritten slots"
    )
    slots = [plain[0], plain[1], 0.0, plain[2], plain[3], 0.0]
    assert by_formula("val/ratio", micros, text, (5, 2)) == pytest.approx(sum(slots) / 6)


def verdict(name: str, logged: float, expected: float) -> MetricVerdict:
    return MetricVerdict(name, MetricStatus.FAIL, logged=logged, expected=expected, abs_err=abs(logged - expected),
                         scale=abs(expected))  # fmt: skip


@pytest.mark.parametrize("name", ["loss/policy_avg", "loss/value_avg", "policy/entropy_avg", "val/ratio",
                                  "policy/approxkl_avg", "val/clipfrac_avg"])  # fmt: skip
def test_made_up_poolings_get_no_diagnosis(micros, name):
    found = candidates(name, micros, GEO)
    metric = next(m for m in POOLED_MEANS if m.name == name)
    sums = pooled(metric, micros)
    value = sums.token_mean()
    per_mb = sums.part_means()
    for logged in (value * 1.37, statistics.median(per_mb), value + 0.01 * abs(value) + 1e-3):
        diagnosis, reason = diagnose(verdict(name, logged, value), found, "float32", TOLERANCES)
        assert diagnosis is None and reason.startswith(NO_MATCH), (logged, diagnosis)


def test_each_candidate_is_named_when_it_is_what_was_logged(micros):
    for name in ("loss/policy_avg", "policy/entropy_avg", "loss/value_avg", "val/ratio", "val/ratio_var"):
        found = candidates(name, micros, GEO)
        for c in found:
            diagnosis, reason = diagnose(verdict(name, c.value, c.value + 1.0), found, "float32", TOLERANCES)
            if diagnosis is not None:  # an equal value reached more simply may win; never a class not behind it
                same = {tuple(sorted(o.classes)) for o in found if abs(o.value - c.value) <= 1e-5 * (1 + abs(c.value))}
                assert tuple(sorted(diagnosis.classes)) in same
            else:
                assert "unambiguously" in reason


def test_ambiguous_simplest_explanations_name_nothing():
    a = Candidate((1,), "one", 0.5)
    b = Candidate((11,), "other", 0.5)
    diagnosis, reason = diagnose(verdict("val/ratio", 0.5, 1.0), [a, b], "float32", TOLERANCES)
    assert diagnosis is None and "unambiguously" in reason


def test_empty_micro_batch_counted_as_one_token():
    gen = torch.Generator().manual_seed(1)
    mbs = [micro(m, lengths, gen) for m, lengths in enumerate([[0, 0], [3, 1], [0], [2, 5]])]
    sums = [loop_masked(mb.record.entropy, mb.response_mask) for mb in mbs]
    want = sum(s for s, _ in sums) / sum(max(c, 1) for _, c in sums)
    text = "token mean with every empty micro-batch counted as one token"
    found = [c for c in candidates("policy/entropy_avg", mbs, GEO) if c.formula == text]
    assert [c.classes for c in found] == [(12,)] and found[0].value == pytest.approx(want)
    diagnosis, _ = diagnose(verdict("policy/entropy_avg", want, want * 1.5), candidates("policy/entropy_avg", mbs, GEO),
                            "float32", TOLERANCES)  # fmt: skip
    assert diagnosis is not None and diagnosis.classes == (12,)


def test_no_empty_micro_batch_no_class_12(micros):
    assert not any(12 in c.classes for c in candidates("policy/entropy_avg", micros, GEO))


def test_stale_rows_of_the_previous_update(micros):
    sums = [loop_masked(mb.record.entropy, mb.response_mask) for mb in micros]
    want = sum(s for s, _ in sums) / sum(c for _, c in sums)
    found = candidates("policy/entropy_avg", micros[2:], GEO, earlier=micros[:2])
    stale = [c for c in found if c.classes == (8,)]
    assert len(stale) == 1 and stale[0].value == pytest.approx(want)
    diagnosis, _ = diagnose(verdict("policy/entropy_avg", want, want + 1.0), found, "float32", TOLERANCES)
    assert diagnosis is not None and diagnosis.classes == (8,)
    ratio = [loop_masked(torch.exp(mb.record.logprobs - mb.old_logprobs), mb.response_mask) for mb in micros]
    found = candidates("val/ratio_var", micros[2:], GEO, earlier=micros[:2])
    stale = [c for c in found if c.classes == (8,)]
    assert stale[0].value == pytest.approx(statistics.variance([s / c for s, c in ratio]))


def rollout_view(lengths: list[int], gen: torch.Generator):
    from harness.algorithms.ppo.view import RolloutView

    rows = len(lengths)
    r = torch.tensor([[t < n for t in range(T)] for n in lengths])
    logprobs = -torch.rand(rows, T, generator=gen, dtype=torch.float64) * 3
    return RolloutView(torch.zeros(rows, T, dtype=torch.long), logprobs, torch.zeros(rows, T), r, r, logprobs.clone())


def test_rollout_candidates_match_slow_recomputations():
    from harness.algorithms.ppo.wrong.rollout_poolings import rollout_candidates

    lengths = [5, 3, 0, 2, 4, 1, 5]
    rollout = rollout_view(lengths, torch.Generator().manual_seed(2))
    lp, r = rollout.logprobs, rollout.response_mask
    right = sum(-float(lp[i, t]) for i in range(7) for t in range(T) if r[i, t]) / 7
    sentinel = sum(-float(lp[i, t]) if r[i, t] else -1.0 for i in range(7) for t in range(T)) / 7
    found = {c.classes: c.value for c in rollout_candidates("objective/entropy", rollout, right, 5)}
    # 7 samples in chunks of 5: averaged over 10 rows, three of them zero
    assert found[(13,)] == pytest.approx(right * 7 / 10)
    assert found[(7,)] == pytest.approx(sentinel)
    assert found[(7, 13)] == pytest.approx(sentinel * 7 / 10)
    # a rollout that fits one chunk is not padded; only entropy has the sentinel candidate
    assert {c.classes for c in rollout_candidates("objective/entropy", rollout, right, 64)} == {(7,)}
    assert rollout_candidates("objective/kl", rollout, 0.3, 64) == []
    kl = rollout_candidates("objective/kl", rollout, 0.3, 5)
    assert [c.classes for c in kl] == [(13,)] and kl[0].value == pytest.approx(0.3 * 0.7)
    for logged, want in ((sentinel, (7,)), (right * 0.7, (13,))):
        diagnosis, _ = diagnose(verdict("objective/entropy", logged, right),
                                rollout_candidates("objective/entropy", rollout, right, 5), "float32",
                                TOLERANCES)  # fmt: skip
        assert diagnosis is not None and diagnosis.classes == want
    diagnosis, reason = diagnose(verdict("objective/entropy", right * 1.37, right),
                                 rollout_candidates("objective/entropy", rollout, right, 5), "float32",
                                 TOLERANCES)  # fmt: skip
    assert diagnosis is None and reason.startswith(NO_MATCH)


def test_running_accumulation_counter_is_named():
    from types import SimpleNamespace

    from harness.algorithms.ppo.scenarios.gradients import minibatch_counter

    def trace(*ends):
        starts = (0,) + tuple(e + 1 for e in ends[:-1])
        steps = [SimpleNamespace(backward_ids=list(range(a, e + 1))) for a, e in zip(starts, ends)]
        return SimpleNamespace(backwards=tuple(range(ends[-1] + 1)), steps=steps)

    # micro-batches 4+2 per minibatch, gradient_accumulation_steps 3: steps after micro-batches 3 and 6
    found = minibatch_counter(trace(2, 5), per_minibatch=2, accumulation=3)
    assert found.classes == (15,) and "micro-batches 3 and 6" in found.formula and "(class" not in found.formula
    assert minibatch_counter(trace(1, 3, 5, 7), per_minibatch=2, accumulation=3) is None  # the right boundaries
    assert minibatch_counter(trace(2, 4), per_minibatch=2, accumulation=3) is None  # off them, but no counter of 3


def test_diagnosed_classes_read_check_diagnoses_and_keep_a_combinations_tie():
    from mutants.runner import diagnosed_classes

    counter = {"classes": [15], "formula": "steps after micro-batches 3 and 6 ...: an accumulation counter"}
    noted = {"status": "fail", "message": f"{counter['formula']} (class 15)", "metrics": [], "diagnoses": [counter]}
    assert diagnosed_classes([noted]) == (15,)
    assert diagnosed_classes([{**noted, "status": "pass"}]) == ()
    assert diagnosed_classes([{**noted, "diagnoses": []}]) == ()  # a message that names a class is no diagnosis
    metric = {"failed": True, "diagnosis": {"classes": [12]}}
    assert diagnosed_classes([{"status": "fail", "message": "", "metrics": [metric, metric]}, noted]) == (12,)
    both = {"failed": True, "diagnosis": {"classes": [51, 50]}}  # one combined formula: both classes, neither first
    assert diagnosed_classes([{"status": "fail", "message": "", "metrics": [both, both]}]) == (50, 51)
    passing = {**both, "failed": False}  # a diagnosis of a metric that passed is no vote
    assert diagnosed_classes([{"status": "fail", "message": "", "metrics": [both, both, metric, passing]}]) == (50, 51)
    assert diagnosed_classes([{"status": "fail", "message": "", "metrics": [both, metric, passing]}]) == (12, 50, 51)
