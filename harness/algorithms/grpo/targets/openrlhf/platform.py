"""OpenRLHF on the CPU: the placeholder `flash_attn` and `vllm` modules, DeepSpeed's CPU accelerator, a one-rank
gloo group, and the CUDA calls OpenRLHF 0.11.2 makes by name, replaced while the target runs.

Every line here is ours. What each line uses:

- DeepSpeed's own override: `DS_ACCELERATOR=cpu` (deepspeed.accelerator.real_accelerator), set before DeepSpeed is
  first imported in this process, so that its engine, its optimizer and its collectives run on the CPU.
- The process group: a one-rank gloo group (`init_process_group("gloo", rank=0, world_size=1, store=HashStore())`),
  opened before OpenRLHF's `DeepspeedStrategy.setup_distributed` calls `deepspeed.init_distributed`, which then keeps
  it; `RANK`, `WORLD_SIZE`, `LOCAL_RANK` and the master address are set for one rank (DeepSpeed looks for MPI
  without them).
- Placeholders (`placeholders()`): openrlhf 0.11.2 imports `flash_attn` at the top of `openrlhf/models/
  ring_attn_utils.py` (which `openrlhf.models` imports first, so `PolicyLoss` needs it) and `vllm` at the top of
  `openrlhf/trainer/ray/vllm_engine.py` (which `openrlhf.trainer.ray` imports, so `ActorPPOTrainer` needs it). Both
  are used only for packed samples, ring attention and the rollout engines, none of which this target runs; neither
  installs on a machine without CUDA. Where one is missing (importlib finds no such module), a placeholder module
  takes its name in `sys.modules` of this process only: every name asked of it is a function that raises. A real
  `flash_attn` or `vllm` is never replaced. `log_probs_from_logits` (openrlhf/models/utils.py) tries
  `flash_attn.ops.triton.cross_entropy` and falls back to torch on ImportError: the placeholder has no submodules
  but those OpenRLHF imports at module level, so it falls back.
- CUDA by name (`cuda_replaced()`, restored on exit): OpenRLHF has no device override. In
  `DeepspeedStrategy.setup_distributed` (openrlhf/utils/deepspeed/deepspeed.py) `torch.cuda.set_device(local_rank)`
  does nothing and `init_device_mesh("cuda", ...)` makes its mesh on the CPU;
  `torch.cuda.current_device()` is 0 where `NaiveReplayBuffer.__init__` formats it into a device name it never uses
  (its `target_device` is read only by `NaiveReplayBuffer.sample`, which `ppo_train` does not call) and "cpu" where
  `ActorPPOTrainer.ppo_train` moves each micro-batch and `DeepspeedStrategy.all_reduce` moves the metrics;
  `torch.cuda.synchronize()` (`torch_dist_barrier_and_cuda_sync`, openrlhf/utils/distributed_util.py, from
  `ActorPPOTrainer.__init__`) does nothing.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import os
import sys
import types

import torch

PLACEHOLDERS = {
    "flash_attn": ("flash_attn.bert_padding", "flash_attn.utils", "flash_attn.utils.distributed"),
    "vllm": ("vllm.inputs", "vllm.utils"),
}
"""The modules openrlhf 0.11.2 imports at module level and the target never calls: the top module -> the submodules
its imports name (ring_attn_utils.py: flash_attn.bert_padding, flash_attn.utils.distributed; vllm_engine.py:
vllm.inputs, vllm.utils)."""


class Placeholder(types.ModuleType):
    """A module whose every public name is a function that raises: imported, never called."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)

        def unavailable(*args, **kwargs):
            raise RuntimeError(f"{self.__name__}.{name}: a placeholder of the openrlhf target (the real module is "
                               "not installed); OpenRLHF called it, which this target's runs never should")

        return unavailable


def placeholders() -> tuple[str, ...]:
    """A placeholder in `sys.modules` for each module of PLACEHOLDERS that cannot be imported here; the names put."""
    put = []
    for top, subs in PLACEHOLDERS.items():
        if top in sys.modules or importlib.util.find_spec(top) is not None:
            continue
        for name in (top, *subs):
            module = Placeholder(name)
            module.__spec__ = importlib.machinery.ModuleSpec(name, None)
            sys.modules[name] = module
            put.append(name)
    return tuple(put)


def on_cpu() -> None:
    """DeepSpeed's CPU accelerator and a one-rank gloo group in this process (module docstring); kept for its life."""
    import torch.distributed as dist

    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    for key, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": "0"}.items():  # fmt: skip
        os.environ.setdefault(key, value)
    placeholders()
    if not dist.is_initialized():
        dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())


@contextlib.contextmanager
def cuda_replaced(current_device):
    """While inside: `torch.cuda.current_device()` returns `current_device` (0 or "cpu", module docstring),
    `torch.cuda.set_device` and `torch.cuda.synchronize` do nothing, and OpenRLHF's `init_device_mesh` makes a CPU
    mesh."""
    from openrlhf.utils.deepspeed import deepspeed as strategy_module

    mesh = strategy_module.init_device_mesh
    undo = [(torch.cuda, name, getattr(torch.cuda, name)) for name in ("current_device", "set_device", "synchronize")]
    undo.append((strategy_module, "init_device_mesh", mesh))
    torch.cuda.current_device = lambda: current_device
    torch.cuda.set_device = torch.cuda.synchronize = lambda *args, **kwargs: None
    strategy_module.init_device_mesh = lambda device_type, *args, **kwargs: mesh("cpu", *args, **kwargs)
    try:
        yield
    finally:
        for owner, name, value in undo:
            setattr(owner, name, value)
