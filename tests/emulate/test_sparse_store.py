"""emulate.sparse_store's SparseStore: what a rank of a sparse run answers for the absent ranks, through torch's
own store wrappers (the process group holds a PrefixStore around it)."""
from __future__ import annotations

import gc

import pytest
import torch.distributed as dist

from stepcast.emulate.sparse_store import NCCL_ID_PREFIX, UNIQUE_ID_BYTES, SparseRunError, SparseStore


def prefixed(inner: dist.Store, members: list[int], present: set[int]) -> dist.PrefixStore:
    """A group's store as torch holds it: a PrefixStore around the SparseStore, no Python reference kept."""
    return dist.PrefixStore("g", SparseStore(inner, "g", members, frozenset(present), []))


def test_a_store_only_torch_holds_still_answers_after_a_collection():
    inner = dist.HashStore()
    inner.set("g/key", b"value")
    store = prefixed(inner, [0, 1], {0})
    gc.collect()
    assert store.get("key") == b"value"


def test_an_absent_members_symmetric_memory_request_is_this_ranks_own_on_its_local_device(monkeypatch):
    """The request (device, pid, sizes...) of absent rank 10 is this rank's with device 10 % 8: its pid is this
    rank's, so the descriptor ring sends to this rank itself; a barrier's int is the same value."""
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    store = SparseStore(dist.HashStore(), "tp", [8, 9, 10, 11], frozenset({8}), [])
    request = (0).to_bytes(4, "little") + (4242).to_bytes(4, "little") + bytes(40)   # device 0, pid 4242, sizes
    store.set("tp//CUDASymmetricMemory/3/0", request)             # torch's key: the group's name first
    store.wait(["tp//CUDASymmetricMemory/3/0", "tp//CUDASymmetricMemory/3/2"])     # no wait for the absent one
    stand_in = store.get("tp//CUDASymmetricMemory/3/2")
    assert stand_in[:4] == (2).to_bytes(4, "little") and stand_in[4:] == request[4:]
    store.set("tp//CUDASymmetricMemory/4/0", (0).to_bytes(4, "little"))
    assert store.get("tp//CUDASymmetricMemory/4/3") == (0).to_bytes(4, "little")


def test_the_world_groups_store_leaves_a_subgroups_keys_alone():
    """The world group's store sees a subgroup's keys under the subgroup's name: its members are not the world's."""
    inner = dist.HashStore()
    world = SparseStore(inner, "0", [0, 1, 2, 3], frozenset({0}), [])
    inner.set("0//41//CUDASymmetricMemory/0/1", b"peer")
    assert world.get("0//41//CUDASymmetricMemory/0/1") == b"peer"


def test_a_subgroups_key_that_names_its_ranks_is_answered_by_any_store_that_sees_it(monkeypatch):
    """torch 2.8 on prefixes a group's symmetric-memory store with ``symmetric_memory-<its global ranks>`` and it
    reaches the world group's store under the subgroup's name: the ranks in the key are the members answered for."""
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    inner = dist.HashStore()
    world = SparseStore(inner, "0", list(range(16)), frozenset({0, 8}), [])
    prefix = "0//2//symmetric_memory-8_9_10_11/CUDASymmetricMemory/0/"
    request = (0).to_bytes(4, "little") + bytes(44)
    world.set(prefix + "0", request)
    world.wait([prefix + "0", prefix + "3"])                       # no wait for absent rank 11
    assert world.get(prefix + "3")[:4] == (3).to_bytes(4, "little")
    assert world.add("0//2//symmetric_memory-8_9_10_11/CUDASymmetricMemory/1/num_members", 1) == 4


def test_this_rank_counts_for_the_absent_members_at_the_exchanges_barrier():
    store = SparseStore(dist.HashStore(), "tp", [8, 9, 10, 11], frozenset({8}), [])
    assert store.add("tp//CUDASymmetricMemory/1/num_members", 1) == 4    # the group's size: the last member
    assert store.add("other/num_members", 1) == 1


def test_symmetric_memory_with_several_running_and_absent_members_is_refused_in_one_line():
    inner = dist.HashStore()
    store = SparseStore(inner, "tp", [0, 1, 2, 3], frozenset({0, 1}), [])
    store.set("tp//CUDASymmetricMemory/0/0", bytes(48))
    with pytest.raises(SparseRunError, match="several running ones"):
        store.get("tp//CUDASymmetricMemory/0/2")


def test_only_the_groups_own_unique_ids_are_recorded_as_its_communicators():
    """torch makes a subgroup's communicator lazily and sets its id under ``<subgroup>//cuda//0`` through the world
    group's store (``0//<subgroup>//cuda//0`` there): only the subgroup records it, with its own members."""
    inner = dist.HashStore()
    comms: list[dict] = []
    world = SparseStore(inner, "0", [0, 1, 2, 3], frozenset({0}), comms)
    tp = SparseStore(dist.PrefixStore("0", world), "29", [0, 1], frozenset({0}), comms)
    unique_id = NCCL_ID_PREFIX.ljust(UNIQUE_ID_BYTES, b"\0")
    tp.set("29//cuda//0", unique_id)
    assert [(c["group"], c["members"]) for c in comms] == [("29", [0, 1])]


def test_torch_2_6s_own_symmetric_memory_store_answers_for_the_absent_members(monkeypatch):
    """torch 2.6 exchanges through a FileStore of the group's own (``store_all_gather/<seq>/<rank>``, no group
    prefix); the store handed to set_group_info is wrapped as a dedicated SparseStore when members are absent."""
    from torch.distributed import distributed_c10d as c10d

    from stepcast.emulate import sparse_store

    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    store = SparseStore(dist.HashStore(), "tp", [8, 9, 10, 11], frozenset({8}), [], dedicated=True)
    request = (0).to_bytes(4, "little") + (4242).to_bytes(4, "little") + bytes(40)
    store.set("store_all_gather/0/0", request)
    store.wait(["store_all_gather/0/0", "store_all_gather/0/3"])
    assert store.get("store_all_gather/0/3")[:4] == (3).to_bytes(4, "little")

    handed: list = []

    class Real:
        @staticmethod
        def set_group_info(name, rank, size, given):
            handed.append(given)

        rendezvous = "the real class's"

    monkeypatch.setattr(c10d, "_resolve_process_group", lambda name: name)
    monkeypatch.setitem(c10d._world.pg_group_ranks, "tp", {8: 0, 9: 1})
    monkeypatch.setitem(c10d._world.pg_group_ranks, "full", {8: 0})
    proxy = sparse_store._GroupInfoProxy(Real, frozenset({8}), {"comms": []})
    inner = dist.HashStore()
    proxy.set_group_info("tp", 0, 2, inner)
    proxy.set_group_info("full", 0, 1, inner)
    assert isinstance(handed[0], SparseStore) and handed[1] is inner
    assert proxy.rendezvous == "the real class's"


def test_nccl_scalable_inits_roots_absent_from_the_run_get_stand_in_ids(monkeypatch):
    """With NCCL's scalable init torch sets one id per root (``UniqueNCCLID:<r>``, a root per 128 members by default):
    root 1 of a 256-member world is rank 128, absent from a run of rank 0, so its id is a stand-in, not a wait."""
    from stepcast.emulate.sparse_store import root_rank

    monkeypatch.delenv("TORCH_NCCL_RANKS_PER_ROOT", raising=False)
    assert [root_rank(r, list(range(256))) for r in (0, 1)] == [0, 128]
    assert [root_rank(r, list(range(300))) for r in (0, 1, 2)] == [0, 100, 200]
    inner = dist.HashStore()
    comms: list[dict] = []
    world = SparseStore(inner, "0", list(range(256)), frozenset({0}), comms)
    unique_id = NCCL_ID_PREFIX.ljust(UNIQUE_ID_BYTES, b"\0")
    world.set("0//cuda//UniqueNCCLID:0", unique_id)
    assert world.get("0//cuda//UniqueNCCLID:1").startswith(NCCL_ID_PREFIX)
    assert [c["key"] for c in comms] == ["root"]          # the communicator: named by the first root's id


def test_a_clone_made_through_torchs_prefix_store_answers_for_the_absent_members_too():
    """newer torch (2.14) clones a group's store in C++ (through the PrefixStore around the SparseStore); the clone is
    another client of the same store that still stands in for the absent setter of a unique id."""
    inner = dist.HashStore()
    inner.set("g/shared", b"value")
    clone = prefixed(inner, [0, 1], {1}).clone()      # rank 0, the id's setter, is absent
    assert clone.get("shared") == b"value"
    assert clone.get("0").startswith(NCCL_ID_PREFIX)  # the group's first unique id, set by absent rank 0
