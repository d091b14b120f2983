"""The emulated driver's event clock: what autotuners read through ``cuEventElapsedTime``."""
from __future__ import annotations

import pytest

from stepcast.emulate.driver.child import run_python

TIMED = r"""
import torch
a = torch.randn(64, 64, device="cuda")
start, mid, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
start.record()
mid.record()
for _ in range(4):
    a.add_(1)
end.record()
end.synchronize()
print(start.elapsed_time(mid), mid.elapsed_time(end))
"""


@pytest.mark.slow
def test_elapsed_time_is_positive_and_grows_with_the_work_between_events():
    run = run_python(["-c", TIMED], "h100-sxm")
    assert run.returncode == 0, run.stderr[-2000:]
    empty, four = (float(w) for w in run.stdout.split()[-2:])
    assert empty == 0.0
    assert four > 0.0  # Inductor's coordinate-descent tuner divides by such a time
    assert four == pytest.approx(4e-3)  # one nominal microsecond per launch, the nominal event clock
