"""The C++ op-context hook (csrc/opctx.cpp) stays quiet under torch.compile: the fake tensors the compiler traces
with are CUDA tensors without memory, and asking them for a data pointer threw inside the RecordFunction callback,
which torch reports on stderr once per traced op."""
from __future__ import annotations

import textwrap

import pytest

COMPILED_FUNCTION = textwrap.dedent("""
    import torch

    def f(x, w):
        return torch.nn.functional.gelu(x @ w).sum(dim=0).clone()

    compiled = torch.compile(f, backend="aot_eager")  # traces with fake tensors, runs the aten ops (no Triton)
    x = torch.randn(8, 16, device="cuda", requires_grad=True)
    w = torch.tensor([[0.5] * 4] * 16, device="cuda")  # small host data: the driver keeps its real bytes
    compiled(x, w).sum().backward()
""")


@pytest.mark.slow
def test_compiling_prints_no_record_function_callback_errors(emulate_run, tmp_path):
    script = tmp_path / "compiled.py"
    script.write_text(COMPILED_FUNCTION)
    proc, doc, traces = emulate_run(tmp_path, script)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert doc["ranks"][0]["kernels"] > 0
    assert "Exception in RecordFunction callback" not in proc.stderr


TRAINING_STEPS = textwrap.dedent("""
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(16, 64, device="cuda")
    for _ in range(4):
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
""")


@pytest.mark.slow
@pytest.mark.parametrize("op_context", ["native", "python"])
def test_the_capture_counts_the_same_host_work_in_every_steady_iteration(emulate_run, tmp_path, op_context):
    # the counted host model's inputs: aten op entries (and, with the native hook, autograd node evaluations) and
    # Python calls before each call; training steps that repeat the same work count the same
    script = tmp_path / "steps.py"
    script.write_text(TRAINING_STEPS)
    options = ("--python-op-context",) if op_context == "python" else ()
    proc, _, (trace,) = emulate_run(tmp_path, script, options=options)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert trace["meta"]["host_work"] == ("record_function" if op_context == "native" else "dispatch_mode")
    events = list(trace["events"])
    bounds = [i for i, ev in enumerate(events) if ev["kind"] == "iteration"] + [len(events)]
    per_iteration = [tuple(sum(ev.get(unit, 0) for ev in events[a:b]) for unit in ("host_ops", "host_nodes",
                                                                                   "host_py"))
                     for a, b in zip(bounds, bounds[1:])]
    steady = per_iteration[2:4]
    assert steady[0] == steady[1]
    ops, nodes, py = steady[0]
    assert ops >= 10  # two linears, a gelu, a sum, their backward ops and SGD's
    assert (nodes > 0) == (op_context == "native")
    assert py > ops  # nn.Module calls, the optimizer's Python: more Python calls than ops


FAKE_TENSOR_COPIES = textwrap.dedent("""
    import torch
    import torch._functorch.config
    from torch._subclasses.fake_tensor import FakeTensorMode

    known = torch.tensor([1.0, 2.0], device="cuda")  # small host data: the data path holds real bytes (copy_ replays)
    for unsafe in (False, True):  # fake tensors that throw on a mutable data pointer, and ones that warn
        torch._functorch.config.fake_tensor_allow_unsafe_data_ptr_access = unsafe
        with FakeTensorMode():
            a = torch.empty(4, device="cuda")
            a.copy_(torch.empty(4, device="cuda"))
            a.add_(1)
    print(known.sum().item())
""")


@pytest.mark.slow
def test_copies_between_fake_tensors_print_no_callback_errors_or_data_pointer_warnings(emulate_run, tmp_path):
    # torch.compile's tracing (torchtitan's FlexAttention) copies into fake CUDA tensors; the hook's host replay of
    # copy_ asked the destination for its mutable data pointer, which throws or warns on them
    script = tmp_path / "fake_copies.py"
    script.write_text(FAKE_TENSOR_COPIES)
    proc, _, _ = emulate_run(tmp_path, script)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "3.0" in proc.stdout
    assert "Exception in RecordFunction callback" not in proc.stderr
    assert "Accessing the data pointer of FakeTensor" not in proc.stderr


@pytest.mark.slow
def test_the_native_hook_names_complex_dtypes(emulate_run, tmp_path):
    # torchtitan's rotary embedding multiplies complex64 tensors; named 'torch.other' they had no width to time
    script = tmp_path / "complex.py"
    script.write_text("import torch\nx = torch.ones(64, 32, dtype=torch.complex64, device='cuda')\n(x * x).sum()\n")
    proc, _, (trace,) = emulate_run(tmp_path, script)
    assert proc.returncode == 0, proc.stderr[-2000:]
    muls = [ev for ev in trace["events"] if ev["kind"] == "kernel" and ev.get("op") == "aten.mul.Tensor"]
    assert muls and muls[0]["op_dtypes"][:2] == ["torch.complex64", "torch.complex64"]


# An op whose output size a kernel counts (nonzero; masked_select and torch.where go through it) sizes its output from
# the count it reads back. With real input bytes the hook runs it on the host first, so the count, the output's size
# and its values are a real run's; before, the count read as 0 and every such output was empty (a MoE dispatcher's
# permutation then disagreed with its split sizes).
SIZED_BY_DATA = textwrap.dedent("""
    import torch
    mask = torch.tensor([[True, False, True], [False, False, True]]).cuda()  # copied in: real bytes
    print("NONZERO", mask.nonzero().cpu().tolist())
    print("SELECTED", torch.arange(6, device="cuda").view(2, 3).masked_select(mask).numel())
    print("WHERE", torch.where(mask[:, 2])[0].numel())
""")


@pytest.mark.slow
def test_an_output_sized_by_real_data_has_a_real_runs_size(emulate_run, tmp_path):
    script = tmp_path / "sized.py"
    script.write_text(SIZED_BY_DATA)
    proc, _, _ = emulate_run(tmp_path, script)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "NONZERO [[0, 0], [0, 2], [1, 2]]" in proc.stdout
    assert "SELECTED 3" in proc.stdout and "WHERE 2" in proc.stdout
