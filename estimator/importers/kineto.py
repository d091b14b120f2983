"""Kernel timings from real PyTorch profiler traces (``hta/tests/data``, ``kineto/tb_plugin/samples``,
``param/et_replay/tests/inputs/*kineto*``), through ``profiling.kineto`` and ``profiling.classify``.

One row per op call: the GPU kernels an op launched (joined by ``profiling.kineto.join_kernels``: correlation to
the runtime call, External id or time containment to the innermost ``cpu_op``) are summed, so the row times the op
as the other sources do (most ops launch one kernel; the split-K GEMMs and layer-norm backwards launch two). Rows
need:

- the op's ``Input Dims``/``Input type`` (traces recorded with ``record_shapes``) and a family from ``classify_op``
  (GEMM dtype fp32 becomes tf32 where the kernel name shows TF32 tensor cores);
- exact dtypes: an op with an int32/uint8/int16 tensor (timed as a same-width dtype elsewhere) is skipped;
- known shapes: ``sum``/``mean`` over given dims are skipped unless the trace records ``Concrete Inputs``
  (PyTorch >= 2.1), whose values also give softmax dims and ``is_causal`` to ``classify_op``;
- a GPU in the catalog (``deviceProperties`` name, e.g. "NVIDIA A100-PG509-200" -> a100-sxm-40gb); traces without
  ``deviceProperties`` or on a GPU outside the catalog (the RTX 2080 Ti of the param traces) give no rows.

Collectives are left out: an NCCL kernel's duration includes the wait for the slowest peer, which is not a property
of the collective's size. ``group`` is the trace's path under the shared folder; ``kernel_name`` the op's first kernel.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
from tqdm import tqdm

from stepcast.estimator.importers.common import finalize
from stepcast.profiling.classify import canonical_dtype, classify_op, is_stand_in_op, tensor_dtype
from stepcast.profiling.kineto import read_trace

SOURCE = "kineto"
PATTERNS = ("hta/tests/data/**/*.json.gz", "hta/tests/data/**/*.json", "kineto/tb_plugin/samples/**/*.json.gz",
            "param/et_replay/tests/inputs/*kineto*.json.gz")


def input_files(root: Path) -> list[Path]:
    root = Path(root)
    return sorted({p for pattern in PATTERNS for p in root.glob(pattern)})


def load(root: Path) -> pd.DataFrame:
    paths = input_files(root)
    frames = [load_trace(path, root) for path in tqdm(paths, desc="kineto traces", unit="trace", disable=None,
                                                       leave=False)]
    frames = [f for f in frames if len(f)]
    return finalize(pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(), SOURCE)


def load_trace(path: Path, root: Path) -> pd.DataFrame:
    """Training rows of one trace (empty when the GPU is unknown or nothing is classifiable)."""
    trace = read_trace(path)
    hardware = trace.hardware_id
    if hardware is None:
        return pd.DataFrame()
    kernels = trace.kernels(("kernel",))
    kernels = kernels[(kernels["op_index"] >= 0) & kernels["op_input_dims"].notna()]
    if kernels.empty:
        return pd.DataFrame()
    calls = kernels.groupby("op_index", sort=False).agg(
        runtime_us=("dur", "sum"), kernel_count=("dur", "size"), kernel_name=("name", "first"),
        op_name=("op_name", "first"), dims=("op_input_dims", "first"), types=("op_input_types", "first"),
        values=("op_concrete_inputs", "first"),
        grid=("grid", "first"), block=("block", "first"))
    records = []
    for call in calls.itertuples():
        types = list(call.types or [])
        if any(tensor_dtype(t) and not canonical_dtype(t) for t in types if isinstance(t, str)):
            continue
        values = call.values if isinstance(call.values, list) else None
        row = classify_op(call.op_name, call.dims, types, call.kernel_name, args=values)
        if row is None or row["family"] == "collective" or is_stand_in_op(call.op_name):
            continue  # a stand-in row (a convolution's implicit GEMM, a batch norm's layer norm, a pool's copy) is
            # not what the kernel ran: its time is no sample of that row
        if row.get("op") in ("sum", "mean") and len(call.dims) > 2 and values is None:
            continue  # the reduced dims are argument values this trace does not record: rows/cols unknown
        row.update(runtime_us=call.runtime_us, kernel_count=call.kernel_count, kernel_name=call.kernel_name,
                   grid=_triple(call.grid), block=_triple(call.block), aten_op=call.op_name)
        records.append(row)
    rows = pd.DataFrame.from_records(records)
    if rows.empty:
        return rows
    rows["hardware"] = hardware
    rows["group"] = str(Path(path).relative_to(root)) if Path(path).is_relative_to(root) else str(path)
    return rows


def _triple(value) -> str | None:
    return ",".join(str(v) for v in value) if isinstance(value, (list, tuple)) else None
