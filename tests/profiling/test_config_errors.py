"""Config mistakes are reported in one line, before anything is measured."""
from __future__ import annotations

import pytest

from stepcast.profiling.runner import Runner
from stepcast.profiling.sampling import ConfigError


def test_unknown_family(tiny_config):
    with pytest.raises(ConfigError, match=r"^families: unknown family 'conv': expected one of gemm, attention"):
        Runner(tiny_config("families=[gemm,conv]"))


def test_unknown_hardware(tiny_config):
    with pytest.raises(ConfigError, match=r"^hardware: unknown hardware 'tpu-v9'"):
        Runner(tiny_config("hardware=tpu-v9"))


def test_gpu_hardware_without_cuda(tiny_config):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ConfigError, match=r"'h100-sxm' is a GPU but CUDA is not available"):
        Runner(tiny_config("hardware=NVIDIA H100 80GB HBM3"))


@pytest.mark.parametrize("override, message", [
    ("gemm.grid.0.dtype=fp12", r"gemm sweep: field 'dtype' = 'fp12'"),
    ("gemm.grid.0.k=-3", r"gemm sweep: field 'k' = -3"),
    ("+gemm.grid.0.colour=red", r"gemm sweep: 'colour' is not a column"),
    ("+gemm.speed=11", r"gemm.speed: unknown sweep key"),
])
def test_bad_sweep_names_the_field(tiny_config, override, message):
    with pytest.raises(ConfigError, match=message):
        Runner(tiny_config("families=[gemm]", override)).plan()


def test_cli_prints_one_line_and_exits_2(cli, tmp_path):
    result = cli("families=[gemm,conv]")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "stepcast: families: unknown family 'conv': expected one of gemm, attention, elementwise, norm, collective, "
        "optimizer"]
    assert not any(tmp_path.glob("*/*.parquet"))
