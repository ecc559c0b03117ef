"""What this machine has: usable cores, GPUs, native bfloat16, and the device a worker of a given rank uses."""

import math
import os

import torch


def usable_cores(cgroup_root: str = "/sys/fs/cgroup", own_cgroups: str = "/proc/self/cgroup") -> int:
    """The cores this process may run on: its affinity, and no more than a container's CPU quota allows
    (``docker run --cpus 2``, a Kubernetes CPU limit: quota / period, rounded up), not all the machine's."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = cgroup_cpu_quota(cgroup_root, own_cgroups)
    return max(1, min(cores, math.ceil(quota))) if quota is not None else cores


def cgroup_cpu_quota(root: str = "/sys/fs/cgroup", own_cgroups: str = "/proc/self/cgroup") -> float | None:
    """The CPUs' worth of time the cgroups of this process allow (the smallest quota / period along its cgroup's
    path: cgroup v2's ``cpu.max``, v1's ``cpu.cfs_quota_us`` and ``cpu.cfs_period_us``); None: no quota, or no
    cgroup files to read (another OS)."""
    try:
        with open(own_cgroups) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    quotas = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":  # v2: one hierarchy
            bases, read = [root, os.path.join(root, "unified")], _v2_quota
        elif "cpu" in controllers.split(","):
            bases, read = [os.path.join(root, controllers), os.path.join(root, "cpu")], _v1_quota
        else:
            continue
        for base in bases:  # the cgroup's folder and each above it (a limit there binds too)
            folder = os.path.normpath(base + "/" + path.strip("/"))
            while True:
                quota = read(folder)
                if quota is not None:
                    quotas.append(quota)
                if len(folder) <= len(base):
                    break
                folder = os.path.dirname(folder)
    return min(quotas) if quotas else None


def _read_numbers(path: str) -> list[str] | None:
    try:
        with open(path) as f:
            return f.read().split()
    except OSError:
        return None


def _v2_quota(folder: str) -> float | None:
    fields = _read_numbers(os.path.join(folder, "cpu.max"))  # "max 100000" (none) or "200000 100000"
    try:
        return int(fields[0]) / int(fields[1]) if fields and fields[0] != "max" else None
    except (ValueError, IndexError, ZeroDivisionError):
        return None


def _v1_quota(folder: str) -> float | None:
    quota, period = (_read_numbers(os.path.join(folder, name)) for name in ("cpu.cfs_quota_us", "cpu.cfs_period_us"))
    try:
        return int(quota[0]) / int(period[0]) if quota and period and int(quota[0]) > 0 else None
    except (ValueError, IndexError, ZeroDivisionError):
        return None


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
