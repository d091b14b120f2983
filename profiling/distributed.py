"""Process groups for the collective family.

Two ways to get ranks:

- local: the harness spawns ``ranks`` processes on this machine (gloo over loopback on a CPU, NCCL with one GPU per
  rank) and collects rank 0's results through a queue, so the parent owns the progress bar and the dataset files;
- external: the harness itself was started once per rank by ``torchrun`` (or by Hydra's submitit launcher on SLURM),
  and every rank joins the process group from the environment (RANK, WORLD_SIZE, MASTER_ADDR...).
"""
from __future__ import annotations

import datetime
import os
import queue as queue_module
import socket
import time
import warnings
from typing import Any, Iterator

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from stepcast.profiling.ops.collective import measure_points
from stepcast.profiling.timing import MeasureSettings

GROUP_TIMEOUT = datetime.timedelta(seconds=120)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def external_world() -> tuple[int, int, int] | None:
    """(rank, world size, ranks per node) when started by torchrun or a SLURM task array, else None.

    Under SLURM without torchrun, submitit's helper exports the torch.distributed variables from SLURM's.
    """
    if "RANK" not in os.environ and int(os.environ.get("SLURM_NTASKS", "1")) > 1:
        try:
            from submitit.helpers import TorchDistributedEnvironment  # type: ignore[import-not-found]

            TorchDistributedEnvironment().export()
        except (ImportError, RuntimeError):
            return None
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world < 2:
        return None
    rank = int(os.environ["RANK"])
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("SLURM_NTASKS_PER_NODE", world)))
    return rank, world, per_node


def init_external(device: str) -> None:
    """Join the process group described by the environment (one GPU per local rank)."""
    if dist.is_initialized():
        return
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if device == "cuda" else "gloo", timeout=GROUP_TIMEOUT)


def _local_rank_main(rank: int, world: int, port: int, backend: str, device: str, points: list[dict[str, Any]],
                     settings: MeasureSettings, deadline: float, results: Any) -> None:
    """Entry point of one spawned rank: join the group, measure, send rank 0's results to the parent."""
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    if device == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=GROUP_TIMEOUT)
    try:
        for message in measure_points(points, settings, device, deadline):
            results.put(message)
    finally:
        if rank == 0:
            results.put(("end", {}, ""))
        dist.destroy_process_group()


class RankFailure(RuntimeError):
    """Internal: a spawned rank died (its traceback is in the message): a failure of the measurement, not of the
    user's input, so it ends ``stepcast profile`` with its traceback."""


def run_local_world(points: list[dict[str, Any]], world: int, backend: str, device: str, settings: MeasureSettings,
                    deadline: float) -> Iterator[tuple[str, dict[str, Any], Any]]:
    """Start ``world`` ranks on this machine and yield rank 0's ("start"|"done", values, result) messages.

    CPU ranks are forked (no second torch import per rank, as DataLoader workers are; each rank uses one thread);
    CUDA cannot be forked once initialised, so GPU ranks are spawned.
    """
    method = "spawn" if device == "cuda" else "fork"
    results = mp.get_context(method).Queue()
    procs = mp.start_processes(
        _local_rank_main, args=(world, _free_port(), backend, device, points, settings, deadline, results),
        nprocs=world, join=False, start_method=method,
    )
    try:
        while True:
            try:
                message = results.get(timeout=0.2)
            except queue_module.Empty:
                if procs.join(timeout=0):  # all ranks exited without the end message
                    return
                continue
            if message[0] == "end":
                break
            yield message
        while not procs.join(timeout=30):
            pass
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as exc:
        raise RankFailure(f"a {backend} rank failed: {str(exc).strip().splitlines()[-1]}") from None
    finally:
        for proc in procs.processes:
            if proc.is_alive():
                proc.terminate()
        deadline_join = time.time() + 5
        for proc in procs.processes:
            proc.join(timeout=max(0.0, deadline_join - time.time()))
