"""Live mode on 2 CPU processes (torch.distributed.run, gloo through accelerate): the live check pools every rank's
records of an interval, as the trainers gather their metrics.

The reference GRPO trainer logs metrics pooled over both ranks: the live check passes on them, and a check of one
rank's records alone would fail (the ranks' token counts differ). TRL's GRPOTrainer reduces each micro-batch over
the ranks, then takes a flat mean of the micro-batches: the live check fails it, diagnosed as class 16 from the
ranks' micro-batches merged position by position. A rank whose records cannot be sent leaves that log unchecked on
every rank alike, and the run goes on (no rank waits for another).

`python tests/harness/live/test_live_dist.py --worker OUT` is one rank (the test launches two).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.dist, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[3]
SPEC_CHANGES = dict(max_steps=3, gradient_accumulation_steps=2, logging_steps=1, beta=0.04)
TRL_BETA = 0.0
"""TRL's run has no KL term: with beta != 0 the TRL adapter saves the toy reference for TRL to load, which under a
2-process launch only the main process writes (its `entropy` is the pooled metric the test needs)."""


def launch(out: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               str(Path(__file__).resolve()), "--worker", str(out)]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "true", "PYTHONPATH": str(ROOT),
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    import torch

    out = tmp_path_factory.mktemp("live-dist")
    proc = launch(out)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(2)]


def test_reference_passes_pooled_across_ranks(ranks):
    for rank, seen in enumerate(ranks):
        intervals = seen["reference"]
        assert len(intervals) == 3
        for interval in intervals:
            assert interval["ranks"] == 2 and not interval["failed"], interval
            assert interval["tokens"] == sum(interval["rank_tokens"])
            assert interval["gradient"] == ["pass"]  # each rank's gradient: the formula over both ranks' tokens
        assert any(len(set(i["rank_tokens"])) == 2 and i["own_failed"] for i in intervals), (rank, intervals)


def test_a_rank_whose_records_cannot_be_sent_leaves_the_log_unchecked_on_every_rank(ranks):
    """Rank 1's records of log 1 fail to serialise: it still takes part in the gather (sending why), so rank 0
    does not wait for it; both skip log 1, check the others, and train as without the fault. One WARNING line,
    rank 0's."""
    for rank, seen in enumerate(ranks):
        fault = seen["gather_fault"]
        assert fault["unchecked"] == [1] and fault["checked"] == 2 and fault["same_history"], (rank, fault)
    (warning,) = ranks[0]["gather_fault"]["warned"]
    assert warning.startswith("live check log 1 (step 1): not checked (the check: GatherFailed: rank 1: its records "
                              "could not be sent (RuntimeError: this rank's records do not pickle))")  # fmt: skip
    assert ranks[1]["gather_fault"]["warned"] == []


def test_trl_flagged_with_class_16_across_ranks(ranks):
    if ranks[0].get("trl") is None:
        pytest.skip(ranks[0].get("trl_skipped", "TRL's GRPO trainer does not import"))
    for seen in ranks:
        intervals = seen["trl"]
        assert len(intervals) == 3
        assert all(i["ranks"] == 2 and i["micro_batches"] == 2 and i["gradient"] == ["pass"] for i in intervals)
        assert all(i["failed"] and i["entropy_classes"] == [16] for i in intervals), intervals
        # the rank's micro-batches taken one by one do not reproduce TRL's value: its micro-batch is every rank's
        assert any(i["unmerged_classes"] != [16] for i in intervals), intervals
    assert ranks[0]["trl"] == ranks[1]["trl"]  # every rank reaches the same verdict


# ---------------------------------------------------------------- one rank


def _spy_gathered():
    """Keep what every rank's records were, per checked interval, as the live check gathered them."""
    import harness.live.session as session

    seen, gather = [], session.gather_records

    def gathered(records):
        out = gather(records)
        seen.append(out)
        return out

    session.gather_records = gathered
    return seen


def _summaries(live, seen, rank: int) -> list[dict]:
    from harness.live import check_interval

    out = []
    for result, per_rank in zip(live.results, seen, strict=True):
        logged = {v.name: v.logged for v in result.verdicts}
        own = check_interval([per_rank[rank]], logged, live.settings, result.interval, result.step)
        flat = [r for records in per_rank for r in records]  # every rank's micro-batches side by side, unmerged
        unmerged = check_interval([flat], logged, live.settings, result.interval, result.step)
        entropy = [v for v in result.verdicts if v.name == "entropy"]
        unmerged_entropy = [v for v in unmerged.verdicts if v.name == "entropy"]
        out.append(
            {
                "interval": result.interval,
                "failed": result.failed,
                "ranks": result.ranks,
                "micro_batches": result.micro_batches,
                "tokens": result.tokens,
                "rank_tokens": [sum(int(r.completion_mask.sum()) for r in records) for records in per_rank],
                "own_failed": own.failed,
                "gradient": [v.status.value for v in result.verdicts if v.name == "gradient/logp_relative"],
                "entropy_classes": list(entropy[0].diagnosis.classes) if entropy and entropy[0].diagnosis else [],
                "unmerged_classes": [c for v in unmerged_entropy if v.diagnosis for c in v.diagnosis.classes],
            }
        )
    return out


def _gather_fault(spec, rank: int, checked: list[dict]) -> dict:
    """The reference run again, rank 1's records of the first log failing to serialise: what each rank saw."""
    import logging

    import harness.live.ranks as ranks
    import harness.live.session as session
    from harness.algorithms.grpo.targets.reference import factory
    from harness.live import live_reference

    payload, calls, warned = ranks._payload, [], []

    def failing(records):
        calls.append(1)
        if rank == 1 and len(calls) == 1:
            raise RuntimeError("this rank's records do not pickle")
        return payload(records)

    class Keep(logging.Handler):
        def emit(self, record):
            if record.levelno >= logging.WARNING:
                warned.append(record.getMessage())

    keep = Keep()
    session.logger.addHandler(keep)
    ranks._payload = failing
    try:
        run = factory(spec)
        with live_reference(run.trainer, every=1) as live:
            history = run.trainer.train()
    finally:
        ranks._payload = payload
        session.logger.removeHandler(keep)

    def trimmed(logs):
        return [{k: v for k, v in m.items() if not k.startswith("live/")} for m in logs]

    return {"unchecked": list(live.summary.unchecked_logs), "checked": live.summary.checked, "warned": warned,
            "same_history": trimmed(history) == trimmed(checked)}  # fmt: skip


def worker(out: Path) -> int:
    import torch

    from harness.algorithms.grpo.spec import GRPOSpec
    from harness.algorithms.grpo.targets.reference import factory
    from harness.dist import shut_down_process_group
    from harness.live import live_reference

    rank = int(os.environ["RANK"])
    spec = GRPOSpec(**SPEC_CHANGES)
    saved: dict = {}
    seen = _spy_gathered()
    run = factory(spec)
    with live_reference(run.trainer, every=1) as live:
        checked = run.trainer.train()
    saved["reference"] = _summaries(live, seen, rank)
    seen.clear()
    saved["gather_fault"] = _gather_fault(spec, rank, checked)
    seen.clear()
    try:
        import trl.trainer.grpo_trainer  # noqa: F401

        from harness.algorithms.grpo.targets import trl as trl_grpo
        from harness.live import LiveCheck
        from harness.targets.hf import quiet
    except ImportError as why:
        saved["trl"], saved["trl_skipped"] = None, f"TRL's GRPO trainer does not import: {why}"
    else:
        trl_run = trl_grpo.build(spec.with_(beta=TRL_BETA))
        check = LiveCheck(every=1)
        trl_run.trainer.add_callback(check)
        with quiet():
            trl_run.trainer.train()
        saved["trl"] = _summaries(check, seen, rank)
    torch.save(saved, out / f"rank{rank}.pt")
    shut_down_process_group()
    return 0


if __name__ == "__main__" and "--worker" in sys.argv:
    sys.exit(worker(Path(sys.argv[sys.argv.index("--worker") + 1])))
