"""The small data path (emulate/driver/csrc/datapath.c): which device bytes read back for real."""
from __future__ import annotations

import textwrap

import pytest

# What printing a CUDA tensor does first (torch/_tensor_str.py): masked_select's count is written by nonzero's
# kernel into a scratch block of the caching allocator and read back. Before that rule, the block still held bytes
# an earlier op had copied in, and the count read as 0x01010101 (16.8 M elements: printing never ended).
STALE_SCRATCH = """
    import torch
    for _ in range(3):
        v = torch.randn(6).cuda().bfloat16().float()
        print("SELECTED", torch.masked_select(v, torch.isfinite(v) & v.ne(0)).numel())
    print("ROUNDTRIP", torch.tensor([3.0, 4.0], device="cuda").cpu().tolist())
"""


def run_script(tmp_path, emulate_run, source: str, nproc: int = 1):
    """Capture ``source`` (a script's text) on ``nproc`` ranks, every rank running; returns (process, traces) of a
    run that succeeded."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    proc, _, traces = emulate_run(tmp_path, script, nproc=nproc, options=("--no-dedup",) if nproc > 1 else ())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, traces


@pytest.mark.slow
def test_a_count_an_op_reads_back_after_its_kernel_is_not_an_earlier_ops_bytes(tmp_path, emulate_run):
    proc, _ = run_script(tmp_path, emulate_run, STALE_SCRATCH)
    counts = [int(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("SELECTED")]
    assert len(counts) == 3 and all(0 <= c <= 6 for c in counts)
    assert "ROUNDTRIP [3.0, 4.0]" in proc.stdout  # bytes copied in still read back


# A pipeline stage learns its input's shapes from the previous stage by recv_object_list (torch.distributed.
# pipelining): a size tensor, then the pickled bytes, over the pair's communicator; paired sends and receives in
# one batch_isend_irecv group must not wait on each other. Before point-to-point messages carried their bytes the
# receiver unpickled zeros ("invalid load key").
POINT_TO_POINT = """
    import os, torch, torch.distributed as dist
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl")
    if rank == 0:
        dist.send_object_list([{"shape": (4, 8192, 4096), "stage": 0}], dst=1)
    else:
        got = [None]
        dist.recv_object_list(got, src=0)
        os.write(1, f"META {got[0]}\\n".encode())
    mine = torch.tensor([float(rank + 1)] * 4).cuda()  # copied in: real bytes (a fill kernel's would be zeros)
    theirs = torch.empty(4, device="cuda")
    peer = 1 - rank
    for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, peer), dist.P2POp(dist.irecv, theirs, peer)]):
        work.wait()
    os.write(1, f"PAIR {rank} {theirs.cpu().tolist()}\\n".encode())  # one write: the ranks share the pipe
    dist.destroy_process_group()
"""


@pytest.mark.slow
def test_point_to_point_messages_carry_their_bytes(tmp_path, emulate_run):
    proc, _ = run_script(tmp_path, emulate_run, POINT_TO_POINT, nproc=2)
    assert "META {'shape': (4, 8192, 4096), 'stage': 0}" in proc.stdout
    assert "PAIR 0 [2.0, 2.0, 2.0, 2.0]" in proc.stdout and "PAIR 1 [1.0, 1.0, 1.0, 1.0]" in proc.stdout


# A pipeline's first stage only sends activations and receives gradients where a middle stage both receives and
# sends each: over one communicator (torch's with a bound device sends on the group's own), the stages' later
# collective (the gradient norm's all-reduce) is their k-th collective on it, whatever their transfers. Numbered
# together with the transfers, the stages waited in different calls and the run deadlocked.
PIPELINE_THEN_ALL_REDUCE = """
    import os, torch, torch.distributed as dist
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
    x = torch.ones(8, device="cuda")
    for _ in range(2):
        if rank > 0:
            dist.recv(x, src=rank - 1)
        if rank < 2:
            dist.send(x, dst=rank + 1)
    norm = torch.tensor([float(rank + 1)]).cuda()
    dist.all_reduce(norm)
    os.write(1, f"NORM {rank} {norm.item()}\\n".encode())  # one write: the ranks share the pipe
    dist.destroy_process_group()
"""


@pytest.mark.slow
def test_pipeline_transfers_on_a_communicator_leave_its_collectives_numbered_alike(tmp_path, emulate_run):
    proc, traces = run_script(tmp_path, emulate_run, PIPELINE_THEN_ALL_REDUCE, nproc=3)
    assert all(f"NORM {r} 6.0" in proc.stdout for r in range(3)), proc.stdout[-2000:]
    reduces = [next(e for e in t["events"] if e["kind"] == "collective" and e["op"] == "all_reduce"
                    and e.get("count") == 1) for t in traces]
    sends = [e for t in traces for e in t["events"] if e["kind"] == "collective" and e["op"] in ("send", "recv")]
    assert {e["comm"] for e in sends} == {reduces[0]["comm"]}       # the transfers shared the communicator
    assert len({(e["comm"], e["comm_seq"]) for e in reduces}) == 1


# torch's all_to_all_single over NCCL is a group of sends and receives, one to and from every member, the member
# itself included. A MoE layer exchanges its tokens per expert that way and reads the result to the host as its split
# sizes. Before all-to-alls carried their bytes, a communicator of more than two exchanged nothing and a member's
# own part kept whatever bytes its block had held before (garbage split sizes, a 536879104 GiB allocation).
ALL_TO_ALL = """
    import os, torch, torch.distributed as dist
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl")
    for step in range(2):
        mine = torch.tensor([100 * rank + 10 * j + step for j in range(world)]).cuda()  # copied in: real bytes
        got = torch.empty_like(mine)
        dist.all_to_all_single(got, mine)
        os.write(1, f"GOT {rank} {step} {got.cpu().tolist()}\\n".encode())
    dist.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [2, 4])
def test_an_all_to_all_carries_every_members_part(tmp_path, emulate_run, nproc):
    proc, _ = run_script(tmp_path, emulate_run, ALL_TO_ALL, nproc=nproc)
    for rank in range(nproc):
        for step in range(2):
            assert f"GOT {rank} {step} {[100 * j + 10 * rank + step for j in range(nproc)]}" in proc.stdout


# With a bound device, torch makes each new process group by splitting the default communicator (ncclCommSplit),
# which every member calls with its color. Before the members exchanged their colors, a split knew neither its size
# nor its members and exchanged nothing: a MoE dispatcher's token counts gathered over its expert-parallel group read
# as zeros.
SPLIT_GROUP = """
    import os, torch, torch.distributed as dist
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
    pairs = [dist.new_group([0, 2]), dist.new_group([1, 3])] if world == 4 else [dist.new_group([0, 1])] * 2
    mine = torch.tensor([rank + 1]).cuda()  # copied in: real bytes
    got = torch.empty(2, dtype=mine.dtype, device="cuda")
    dist.all_gather_into_tensor(got, mine, group=pairs[rank % 2])
    os.write(1, f"PAIR {rank} {got.cpu().tolist()}\\n".encode())
    dist.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [2, 4])
def test_a_split_communicators_collectives_carry_their_bytes(tmp_path, emulate_run, nproc):
    proc, _ = run_script(tmp_path, emulate_run, SPLIT_GROUP, nproc=nproc)
    expected = {0: [1, 3], 1: [2, 4], 2: [1, 3], 3: [2, 4]} if nproc == 4 else {0: [1, 2], 1: [1, 2]}
    for rank, gathered in expected.items():
        assert f"PAIR {rank} {gathered}" in proc.stdout
