"""verl on the CPU: a platform for verl's plugin registry, and a one-process group.

Every line here is ours. verl 0.9.1 detects its accelerator through `verl.plugin.platform` (CUDA, ROCm, NPU; no
CPU: without an accelerator it falls back to CUDA) and its FSDP engine is registered for `cuda` and `npu` only. This
module hands verl a platform whose device is the CPU (`set_platform`, verl's documented override), with gloo as its
collective backend and a device module whose memory counters read 0, and opens the one-rank gloo process group the
engine's device mesh is made on (verl's own initialisation would ask for NCCL). The engine registered for `cuda` is
then chosen with verl's own override, the environment variable `VERL_ENGINE_DEVICE`: its code runs as it is.
"""

from __future__ import annotations

import contextlib
import os
import sys
import types

import torch

ENGINE_ENVIRONMENT = {"VERL_ENGINE_DEVICE": "cuda", "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
                      "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "0"}  # fmt: skip
"""verl's worker reads its rank from these; the engine registered for `cuda` is the one the CPU platform gets."""


class _CpuDevice(types.ModuleType):
    """`torch.cpu`, with the memory counters and calls verl makes of an accelerator's module (0 or nothing)."""

    def __getattr__(self, name: str):
        return getattr(torch.cpu, name)

    @staticmethod
    def max_memory_allocated(*args, **kwargs) -> int:
        return 0

    max_memory_reserved = memory_allocated = memory_reserved = max_memory_allocated

    @staticmethod
    def mem_get_info(*args, **kwargs) -> tuple[int, int]:
        return (0, 0)

    @staticmethod
    def get_device_name(*args, **kwargs) -> str:
        return "CPU"

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    @staticmethod
    def nothing(*args, **kwargs) -> None:
        return None

    empty_cache = set_device = reset_peak_memory_stats = synchronize = nothing


def cpu_platform():
    """An instance of a `verl.plugin.platform` platform whose device is the CPU."""
    from verl.plugin.platform.platform_base import PlatformBase

    class CpuPlatform(PlatformBase):
        device_name = vendor_name = "cpu"
        device_module = _CpuDevice("cpu_device")

        def is_available(self) -> bool:
            return True

        def current_device(self) -> str:  # `model.to(get_device_id())` must move nothing
            return "cpu"

        def device_count(self) -> int:
            return 1

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"

        def ray_resource_name(self) -> str:
            return "CPU"

        def ray_noset_envvars(self) -> list[str]:
            return []

        def get_device_capability(self, device_index: int = 0):
            return (None, None)

        def nvtx_range(self, msg: str):
            return contextlib.nullcontext()

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        manual_seed_all = manual_seed

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self):
            return None

        def nothing(self, *args, **kwargs) -> None:
            return None

        set_device = synchronize = set_allocator_settings = empty_cache = profiler_start = profiler_stop = nothing

    return CpuPlatform()


def without_unusable_kernels() -> None:
    """Ours: keep transformers from a `kernels` it cannot use. Installing verl downgrades transformers to its pin
    (below 5.11) and leaves behind a `kernels` installed for a newer transformers (0.19 requires a version of every
    kernel repository, which transformers 5.10 does not give at import: ValueError at the import of any model). Where
    transformers' hub-kernels module fails so, `kernels` is made unimportable for this process, which transformers
    reads as kernels not installed (its own ImportError path); a `kernels` it can use is left alone."""
    try:
        import transformers.integrations.hub_kernels  # noqa: F401
    except ImportError:
        return
    except Exception:  # noqa: BLE001 - what an incompatible kernels raises at transformers' import
        for name in [m for m in sys.modules if m == "kernels" or m.startswith("kernels.")]:
            del sys.modules[name]
        sys.modules["kernels"] = None  # `import kernels` raises ImportError
        import transformers.integrations.hub_kernels  # noqa: F401


def on_cpu() -> None:
    """Make verl run on the CPU in this process (module docstring); once per process, kept for its life."""
    import torch.distributed as dist
    from verl.plugin.platform import platform_manager

    without_unusable_kernels()
    for key, value in ENGINE_ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    current = getattr(platform_manager, "_current_platform", None)
    if current is None or current.device_name != "cpu":
        platform_manager.set_platform(cpu_platform())
    if not dist.is_initialized():
        dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
