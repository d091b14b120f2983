"""cuDNN's sm_100 engines on the emulated B200. Before they pick an engine they probe the GPC layout with
``cuOccupancyMaxActiveClusters`` on an empty kernel (``cask_cudnn::nopHardwareDetection``: one block per SM, the
non-portable flag, cluster sizes 32, 30, ..., 2, 1); a refused size 32 leaves the probe's result null and cuDNN
dereferences it while finalising the engine config (SIGSEGV in libcudnn_engines_precompiled), which lost every
KernelBench transposed convolution on the B200 (``python -m benchmarks.emulate.conv``)."""
from __future__ import annotations

import pytest

from stepcast.emulate.driver.child import run_python

TRANSPOSED = r"""
import torch
x = torch.randn(8, 64, 64, 64, device="cuda")
m = torch.nn.ConvTranspose2d(64, 64, 3).cuda()
with torch.no_grad():
    y = m(x)
torch.cuda.synchronize()
print(tuple(y.shape))
"""


@pytest.mark.slow
def test_a_transposed_convolution_runs_its_dgrad_engine_on_the_emulated_b200():
    run = run_python(["-c", TRANSPOSED], "b200")
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip().endswith("(8, 64, 66, 66)")
    assert any("dgrad" in name for name in run.launched())  # the transposed convolution ran cuDNN's dgrad engine
