"""Replay at scale: time and peak memory of ``stepcast replay`` on a large synthetic profiler trace.

    python -m benchmarks.emulate.replay_scale [--kernels 2000000] [--steps 500] [--cache DIR] [--keep]

A real training trace with millions of kernels is not at hand, so :func:`write_trace` writes one the way PyTorch's
profiler does (Kineto new schema): ``ProfilerStep#N`` spans, ``cpu_op`` events with ``External id``, ``Input Dims``
and ``Input type`` (record_shapes), ``cudaLaunchKernel`` runtime calls with their ``correlation``, kernels on a
stream with grid/block, the ``ac2g`` flow events, a ``record_param_comms`` op and an NCCL all-reduce kernel on a
second stream per step and a ``cudaDeviceSynchronize`` closing every step; the device runs behind the host, as in
a GPU-bound step. The file goes to the cache folder (``<cache>/replay_scale/``), never into the repository, and is
reused while its parameters match.

The replay runs in a child process, so its peak resident memory is the child's own
(``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss``); the table gives the wall time, the child's CPU time (user +
system: on a shared machine the wall time also counts what other processes took), that peak, and whether the
replay reproduced the measured step time (the simulator's own check).
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

from stepcast.profiling.atomic import atomic_path
from stepcast.profiling.paths import cache_root

PID, HOST_TID, COMPUTE_STREAM, NCCL_STREAM = 4242, 4242, 7, 20
LAUNCH_LATENCY_US = 4.0
DIMS = (2048, 4096)  # tokens x hidden of the synthetic model

# One layer's ops: (aten op, Input Dims, kernel name, grid, block, kernel duration us).
_T, _H = DIMS
LAYER_OPS: tuple[tuple[str, list, str, list[int], list[int], float], ...] = (
    ("aten::native_layer_norm", [[_T, _H], [_H], [_H], [_H], []],
     "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, "
     "c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)",
     [_T, 1, 1], [128, 1, 1], 14.0),
    ("aten::mm", [[_T, _H], [_H, 3 * _H]],
     "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel"
     "__5x_cublas", [96, 8, 1], [384, 1, 1], 95.0),
    ("aten::_scaled_dot_product_flash_attention", [[1, 32, _T, 128], [1, 32, _T, 128], [1, 32, _T, 128]],
     "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
     "cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, "
     "false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)", [16, 1, 32], [128, 1, 1], 120.0),
    ("aten::mm", [[_T, _H], [_H, _H]],
     "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
     "__5x_cublas", [32, 16, 1], [128, 1, 1], 34.0),
    ("aten::add", [[_T, _H], [_T, _H], []],
     "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
     "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)",
     [8192, 1, 1], [128, 1, 1], 12.0),
    ("aten::gelu", [[_T, 4 * _H], []],
     "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
     "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::"
     "BFloat16)#1}, at::detail::Array<char*, 2> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
     "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::"
     "BFloat16)#1}, at::detail::Array<char*, 2>)", [32768, 1, 1], [128, 1, 1], 30.0),
)
OP_HOST_US, CALL_OFFSET_US, CALL_US, OP_GAP_US = 14.0, 4.0, 6.0, 3.0


class _Writer:
    """Serialises events one JSON object a line (as Kineto does), numbering External ids and correlations."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.next_id = 1
        self.buffer: list[str] = []

    def event(self, cat: str, name: str, ts: float, dur: float, pid: int, tid: int, args: dict) -> None:
        self.buffer.append(f'{{"ph":"X","cat":"{cat}","name":{json.dumps(name)},"pid":{pid},"tid":{tid},'
                           f'"ts":{ts:.3f},"dur":{dur:.3f},"args":{json.dumps(args, separators=(",", ":"))}}},\n')

    def flow(self, phase: str, ident: int, ts: float, pid: int, tid: int) -> None:
        binding = ',"bp":"e"' if phase == "f" else ""
        self.buffer.append(f'{{"ph":"{phase}","id":{ident},"pid":{pid},"tid":{tid},"ts":{ts:.3f},'
                           f'"cat":"ac2g","name":"ac2g"{binding}}},\n')

    def flush(self) -> None:
        self.out.write("".join(self.buffer))
        self.buffer.clear()


def write_trace(path: Path, kernels: int, steps: int) -> Path:
    """Write a gzipped Kineto trace of about ``kernels`` GPU kernels over ``steps`` profiler steps (atomically)."""
    if kernels < steps * (len(LAYER_OPS) + 3):
        raise ValueError(f"--kernels {kernels}: at least {len(LAYER_OPS) + 3} kernels per step are needed")
    layers = max(1, (kernels // steps - 3) // len(LAYER_OPS))
    with atomic_path(path) as tmp, gzip.open(tmp, "wt", compresslevel=1) as out:
        out.write('{"schemaVersion":1,"deviceProperties":[{"id":0,"name":"NVIDIA H100 80GB HBM3",'
                  '"totalGlobalMem":85045870592,"computeMajor":9,"computeMinor":0,"numSms":132}],'
                  '"distributedInfo":{"backend":"nccl","rank":0,"world_size":1},\n"traceEvents":[\n')
        w = _Writer(out)
        host, gpu = 1_000_000.0, 1_000_000.0
        for step in range(steps):
            step_start = host
            # the batch: an H2D copy and the embedding lookup, launched while the device is still idle
            gpu = _launch(w, host, gpu, "aten::copy_", [[_T], [_T], []], ["long int", "long int", "Scalar"],
                          "Memcpy HtoD (Pinned -> Device)", [], [], 3.0, COMPUTE_STREAM,
                          cat="gpu_memcpy", call_name="cudaMemcpyAsync", nbytes=8 * _T)
            host += OP_HOST_US + OP_GAP_US
            gpu = _launch(w, host, gpu, "aten::embedding", [[50304, _H], [_T], [], [], []],
                          ["c10::BFloat16", "long int", "Scalar", "Scalar", "Scalar"],
                          "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, "
                          "unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, "
                          "at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo"
                          "<long, unsigned int>, int, int, unsigned int, unsigned int, long)",
                          [1024, 1, 1], [128, 32, 1], 6.0, COMPUTE_STREAM)
            host += OP_HOST_US + OP_GAP_US
            for layer in range(layers):
                for op, dims, kernel, grid, block, dur in LAYER_OPS:
                    gpu = _launch(w, host, gpu, op, dims, ["c10::BFloat16"] * len(dims), kernel, grid, block,
                                  dur * (1.0 + 0.01 * (layer % 7)), COMPUTE_STREAM)
                    host += OP_HOST_US + OP_GAP_US
            nelems = _T * _H
            comm = {"Process Group Name": "0", "Process Group Description": "default_pg", "Group size": 1,
                    "Process Group Ranks": "[0]", "In msg nelems": nelems, "Out msg nelems": nelems,
                    "dtype": "BFloat16", "Collective name": "allreduce", "In split size": "[]",
                    "Out split size": "[]"}
            gpu = _launch(w, host, gpu, "record_param_comms", [[nelems]], ["c10::BFloat16"],
                          "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                          [32, 1, 1], [640, 1, 1], 60.0, NCCL_STREAM, comm)
            host += OP_HOST_US + OP_GAP_US
            sync_end = max(host + CALL_US, gpu + 2.0)
            w.event("cuda_runtime", "cudaDeviceSynchronize", host, sync_end - host, PID, HOST_TID,
                    {"External id": 0, "cbid": 165, "correlation": w.next_id})
            w.next_id += 1
            host = sync_end + OP_GAP_US
            w.event("user_annotation", f"ProfilerStep#{step}", step_start - 1.0, host - step_start, PID, HOST_TID,
                    {"External id": w.next_id})
            w.next_id += 1
            w.flush()
        out.write('{"name":"process_name","ph":"M","ts":0,"pid":4242,"tid":0,"args":{"name":"python3"}}\n]}\n')
    return path


def _launch(w: _Writer, host: float, gpu: float, op: str, dims: list, types: list[str], kernel: str,
            grid: list[int], block: list[int], dur: float, stream: int, extra: dict | None = None,
            cat: str = "kernel", call_name: str = "cudaLaunchKernel", nbytes: int = 0) -> float:
    """One op: its cpu_op, the runtime call inside it, the flow pair and the GPU activity (a kernel, or a copy
    with ``cat="gpu_memcpy"``); returns the stream's new end."""
    ident = w.next_id
    w.next_id += 1
    w.event("cpu_op", op, host, OP_HOST_US, PID, HOST_TID,
            {"External id": ident, "Input Dims": dims, "Input type": types, **(extra or {})})
    call = host + CALL_OFFSET_US
    w.event("cuda_runtime", call_name, call, CALL_US, PID, HOST_TID,
            {"External id": ident, "cbid": 211, "correlation": ident})
    start = max(call + LAUNCH_LATENCY_US, gpu)
    activity = {"External id": ident, "queued": 0, "device": 0, "context": 1, "stream": stream, "correlation": ident}
    if cat == "kernel":
        activity.update({"registers per thread": 128, "shared memory": 0, "grid": grid, "block": block})
    else:
        activity["bytes"] = nbytes
    w.event(cat, kernel, start, dur, 0, stream, activity)
    w.flow("s", ident, call, PID, HOST_TID)
    w.flow("f", ident, start, 0, stream)
    return start + dur


def cached_trace(kernels: int, steps: int, cache: Path | None = None) -> Path:
    """The synthetic trace for these parameters, written once under the cache folder."""
    path = (cache or cache_root() / "replay_scale") / f"kineto_{kernels}kernels_{steps}steps.json.gz"
    if not path.exists():
        write_trace(path, kernels, steps)
    return path


def measure_replay(trace: Path, extra_args: list[str] | None = None) -> dict[str, float | str]:
    """Run ``stepcast replay`` on ``trace`` in a child; its wall and CPU time (s), peak RSS (GB) and
    report."""
    with tempfile.TemporaryDirectory() as tmp:
        report_path = Path(tmp) / "report.json"
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        before, cpu0 = usage.ru_maxrss, usage.ru_utime + usage.ru_stime
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "stepcast.emulate", "replay", str(trace), "--durations",
                               "measured",
                               "--report", str(report_path), *(extra_args or [])], env={**os.environ})
        wall = time.perf_counter() - t0
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        peak_kb, cpu = usage.ru_maxrss, usage.ru_utime + usage.ru_stime - cpu0
        if proc.returncode != 0:
            raise RuntimeError(f"replay of {trace} exited {proc.returncode}")
        report = json.loads(report_path.read_text())
    if peak_kb <= before:
        print("note: an earlier child had a higher peak; the figure is an upper bound", file=sys.stderr)
    return {"wall_s": wall, "cpu_s": cpu, "peak_gb": peak_kb * 1024 / 1e9, "iteration_ms": report["iteration_time_ms"],
            "measured_ms": report["per_rank"][0].get("measured_iteration_time_ms", float("nan"))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.emulate.replay_scale",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", type=int, default=2_000_000, help="GPU kernels in the trace")
    parser.add_argument("--steps", type=int, default=500, help="profiler steps the kernels are spread over")
    parser.add_argument("--cache", type=Path, default=None, help="folder for the trace (default: the cache)")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    try:
        trace = cached_trace(args.kernels, args.steps, args.cache)
    except ValueError as exc:
        print(f"stepcast: {exc}", file=sys.stderr)
        return 2
    print(f"trace: {trace} ({trace.stat().st_size / 1e6:.0f} MB gzip, ready in {time.perf_counter() - t0:.0f} s)")
    r = measure_replay(trace)
    print(f"kernels {args.kernels:,}  wall {r['wall_s']:.1f} s  CPU {r['cpu_s']:.1f} s  "
          f"peak RSS {r['peak_gb']:.2f} GB  "
          f"step: replayed {r['iteration_ms']:.3f} ms, measured {r['measured_ms']:.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
