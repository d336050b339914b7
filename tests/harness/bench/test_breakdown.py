"""The bench's profile times every hook the gate puts in a run, and the bench's heap settings say what they did."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest
import torch

from harness.bench import measure
from harness.bench.breakdown import PIECES, clocked
from harness.instrument.grad import GradRecorder


def test_the_profile_times_each_of_the_gradient_recorders_hooks():
    """Every hook the recorder registers is a piece of the profile, with the calls it got: a hook left out of the
    profile once cost a medium run 1.5 s that no line showed."""
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with clocked("cpu") as totals:
        with GradRecorder(list(model.parameters()), optimizer, copies=False, track=True, track_min=0):
            for _ in range(2):
                for _ in range(3):
                    model(torch.randn(2, 5)).sum().backward()
                optimizer.step()
                optimizer.zero_grad()
    hooks = {piece for piece in PIECES if piece.startswith("grad_")}
    assert hooks == {"grad_contribution", "grad_accumulated", "grad_step", "grad_after_step", "grad_backward"}
    calls = {piece: totals.calls[piece] for piece in hooks}
    assert calls == {
        "grad_backward": 6,
        "grad_contribution": 12,  # 2 tensors x 6 backward passes
        "grad_accumulated": 12,
        "grad_step": 2,
        "grad_after_step": 2,
    }
    assert all(totals.seconds[piece] >= 0.0 for piece in hooks)
    assert totals.gate_train_s() == pytest.approx(sum(totals.seconds[p] for p in hooks), abs=1e-12)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_the_steady_heap_is_set_by_glibcs_mallopt_and_says_so():
    """In a process of its own: the settings last for the process, and this one runs other tests."""
    probe = "from harness.bench.measure import steady_heap; print(steady_heap())"
    line = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert line.startswith("heap       steady for the timed rounds (glibc mallopt: no block mapped on its own"), line


def test_without_mallopt_the_heap_is_left_as_it_is_and_the_line_says_why(monkeypatch):
    def no_library(name):
        raise OSError("no such library")

    monkeypatch.setattr(ctypes, "CDLL", no_library)
    assert measure.steady_heap().startswith("heap       left as it is: no glibc mallopt here")


def test_a_refused_setting_is_named(monkeypatch):
    class Refusing:
        def __init__(self, name):
            self.mallopt = self

        def __call__(self, number, value):
            return 0 if number == measure.HEAP_SETTINGS["M_TOP_PAD"][0] else 1

    monkeypatch.setattr(ctypes, "CDLL", Refusing)
    assert measure.steady_heap() == "heap       glibc refused mallopt M_TOP_PAD: runs may fault unequally"
