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
