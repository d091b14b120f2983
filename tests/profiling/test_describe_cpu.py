"""The CPU catalog entry: peak FLOP/s estimated from the CPU flags, a valid yaml the catalog loads."""
from __future__ import annotations

from stepcast.profiling.describe_cpu import cpu_spec, estimate_peak_tflops, write_spec
from stepcast.profiling.hardware import cpu_hardware_id, load_spec


def test_peak_estimate_uses_the_widest_unit():
    peaks = estimate_peak_tflops({"avx2", "avx512f", "amx_bf16"}, cores=2, clock_mhz=2000)
    assert peaks["fp32"] == 2 * 2e9 * 64 / 1e12 and peaks["fp64"] == peaks["fp32"] / 2
    assert peaks["bf16"] == 2 * 2e9 * 1024 / 1e12
    assert estimate_peak_tflops({"avx2"}, 1, 1000)["bf16"] == estimate_peak_tflops({"avx2"}, 1, 1000)["fp32"]


def test_written_entry_loads_back(tmp_path):
    spec = cpu_spec(measure_bandwidth=False)
    assert spec.id == cpu_hardware_id() and spec.kind == "cpu"
    path = write_spec(spec, tmp_path)
    assert "ESTIMATES" in path.read_text()
    assert load_spec(path) == spec
