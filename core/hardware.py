"""What this machine has: usable cores, GPUs, native bfloat16, and the device a worker of a given rank uses."""

import os

import torch


def usable_cores() -> int:
    """The cores this process may run on (its affinity), not all the machine's."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def missing_gpus(gpu_ids: list[int]) -> tuple[list[int], int]:
    """The ids among ``gpu_ids`` (CPU -1 aside) this machine does not have, and how many CUDA devices it has."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return [g for g in gpu_ids if g >= count], count


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively (AVX512-BF16, AMX): where --bf16 speeds training up."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a private API: without it, assume not
        return False


def device_for(gpu_ids: list[int], rank: int) -> torch.device:
    """Worker ``rank``'s device: GPU ``gpu_ids[rank % len]``, or the CPU for ``--gpu-ids -1``."""
    gpu = gpu_ids[rank % len(gpu_ids)]
    return torch.device("cpu") if gpu < 0 else torch.device(f"cuda:{gpu}")
