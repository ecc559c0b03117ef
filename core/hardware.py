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


NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # x86 instructions that compute bfloat16 rather than convert it


def cpu_has_native_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU computes bfloat16 natively (AVX512-BF16, AMX): where --bf16 speeds training up.

    On x86 Linux the CPU's flags decide. oneDNN's own check (``torch.ops.mkldnn._is_mkldnn_bf16_supported``) is
    only the fallback elsewhere: it also says yes for AVX-512 CPUs without BF16 (Skylake-X to Ice Lake), where
    oneDNN converts bfloat16 and a bf16 run trains at ~0.6x of float32."""
    flags = cpu_flags(cpuinfo)
    if flags is not None:
        return any(flag in flags for flag in NATIVE_BF16_FLAGS)
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a private API: without it, assume not
        return False


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> set[str] | None:
    """The x86 CPU's feature flags from ``/proc/cpuinfo``; None where there is no such file or no ``flags`` line
    (another OS, another architecture)."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        pass
    return None


def device_for(gpu_ids: list[int], rank: int) -> torch.device:
    """Worker ``rank``'s device: GPU ``gpu_ids[rank % len]``, or the CPU for ``--gpu-ids -1``."""
    gpu = gpu_ids[rank % len(gpu_ids)]
    return torch.device("cpu") if gpu < 0 else torch.device(f"cuda:{gpu}")
