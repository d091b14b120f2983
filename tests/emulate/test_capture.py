"""The capture layer (emulate/capture.py): where an iteration ends, and how ops are described for the classifier."""
from __future__ import annotations

import textwrap

import pytest

# An optimizer whose step runs other optimizers' steps, as torchtitan's OptimizersContainer does (it subclasses
# torch.optim.Optimizer): torch's global step hooks fire for the container and for each inner optimizer.
CONTAINER = """
    import torch
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 4)).cuda()

    class Container(torch.optim.Optimizer):
        def __init__(self, model):
            self.inner = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in model]
            super().__init__([p for m in model for p in m.parameters()], {})

        def step(self, closure=None):
            for opt in self.inner:
                opt.step()

    opt = Container(model)
    for _ in range(3):
        model(torch.randn(8, 16, device="cuda")).sum().backward()
        opt.step()
        opt.zero_grad()
"""


@pytest.mark.slow
def test_an_optimizer_stepping_inner_optimizers_ends_one_iteration_per_step(tmp_path, emulate_run):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(CONTAINER))
    proc, _, traces = emulate_run(tmp_path, script)
    assert proc.returncode == 0, proc.stderr[-3000:]
    marks = [e for e in traces[0]["events"] if e["kind"] == "iteration" and e.get("source") == "optimizer"]
    assert [m["step"] for m in marks] == [0, 1, 2, 3]  # the start, then one per step (not one per optimizer)


def test_describe_gives_one_entry_per_positional_argument():
    import torch

    from stepcast.emulate.capture import describe

    a, b = torch.zeros(2, 3), torch.zeros(3, dtype=torch.float16)
    shapes, dtypes, values, kwargs = describe((a, [a, b], 2, [1, 0]), {"keepdim": True})
    assert shapes == ((2, 3), ((2, 3), (3,)), (), ())
    assert dtypes == ("torch.float32", ("torch.float32", "torch.float16"), "", "")
    assert values == (None, None, 2, (1, 0)) and kwargs == (("keepdim", True),)


def test_a_scripts_own_profiling_and_datasets_modules_are_the_ones_it_imports(tmp_path, emulate_run,
                                                                               script_with_own_modules):
    """Nothing of the project lands on the script's import path: its own ``profiling.py`` and ``datasets/`` win."""
    script = script_with_own_modules(tmp_path / "user")
    proc, doc, _ = emulate_run(tmp_path / "run", script)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "own modules: profiling datasets True" in proc.stdout
