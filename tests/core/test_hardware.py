"""What a3g reads about the machine: native bfloat16 from the CPU's flags."""

import pytest

from core.hardware import cpu_flags, cpu_has_native_bf16

ICE_LAKE = "fpu vme sse sse2 avx avx2 avx512f avx512dq avx512bw avx512vl avx512_vnni avx512_bitalg"


@pytest.mark.parametrize("flags, native", [
    (ICE_LAKE, False),  # AVX-512 without BF16: oneDNN would say yes, and convert
    (ICE_LAKE + " avx512_bf16", True),  # Cooper Lake, Zen 4
    ("avx2 avx512f amx_bf16 amx_tile", True),  # Sapphire Rapids
    ("sse sse2 avx avx2", False),
])
def test_native_bf16_is_the_cpus_flags(tmp_path, flags, native):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: a CPU\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n")
    assert cpu_has_native_bf16(str(cpuinfo)) is native


def test_without_flags_the_answer_is_onednns(tmp_path):
    (tmp_path / "arm").write_text("processor\t: 0\nFeatures\t: fp asimd bf16\n")
    assert cpu_flags(str(tmp_path / "arm")) is None and cpu_flags(str(tmp_path / "absent")) is None
    assert isinstance(cpu_has_native_bf16(str(tmp_path / "absent")), bool)


def cgroup_file(root, relative, text):
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_containers_cpu_quota_bounds_the_cores(tmp_path):
    """``docker run --cpus`` (cgroup v2's cpu.max, v1's cfs files) on a machine of more cores: the affinity still
    names every core, so --workers auto started one worker per host core on a fraction of them."""
    from core.hardware import cgroup_cpu_quota, usable_cores

    v2 = tmp_path / "v2"
    cgroup_file(v2, "self", "0::/\n")
    cgroup_file(v2, "fs/cpu.max", "50000 100000\n")  # half a CPU
    assert cgroup_cpu_quota(str(v2 / "fs"), str(v2 / "self")) == 0.5
    assert usable_cores(str(v2 / "fs"), str(v2 / "self")) == 1
    cgroup_file(v2, "fs/cpu.max", "max 100000\n")  # no limit: the affinity
    assert cgroup_cpu_quota(str(v2 / "fs"), str(v2 / "self")) is None
    assert usable_cores(str(v2 / "fs"), str(v2 / "self")) == usable_cores(str(tmp_path / "none"))
    v1 = tmp_path / "v1"  # a host's view: the process's cgroup below a parent that has the limit
    cgroup_file(v1, "self", "4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n0::/\n")
    cgroup_file(v1, "fs/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n")
    cgroup_file(v1, "fs/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n")
    cgroup_file(v1, "fs/cpu,cpuacct/docker/cpu.cfs_quota_us", "150000\n")
    cgroup_file(v1, "fs/cpu,cpuacct/docker/cpu.cfs_period_us", "100000\n")
    assert cgroup_cpu_quota(str(v1 / "fs"), str(v1 / "self")) == 1.5
    assert usable_cores(str(v1 / "fs"), str(v1 / "self")) == min(2, usable_cores(str(tmp_path / "none")))
    assert cgroup_cpu_quota(str(tmp_path / "none"), str(tmp_path / "no_such_file")) is None
