"""Inside one rank of a sparse run (``stepcast run --run-ranks``): only some ranks of the job run as processes, so
whatever torch waits for from the absent ones must be answered here.

Loaded by :mod:`emulate.capture` (by its file path: nothing of the project is on the script's ``sys.path``) when
``STEPCAST_RUN_RANKS`` lists the ranks that run. What it does, and why:

- the rendezvous store is hosted by the launcher (``TORCHELASTIC_USE_AGENT_STORE=True``: every rank is a client,
  so none waits for ``WORLD_SIZE`` workers to connect); torch's store barriers are off by default
  (``TORCH_DIST_INIT_BARRIER``), so the store is otherwise only used to hand NCCL unique ids around;
- every process group is created through ``_new_process_group_helper`` on every rank (members and non-members,
  in the same order), which is wrapped here to record each group (name, global ranks, the communicator the emulated NCCL
  made for it: ``stepcast_last_comm``) and to give the group a :class:`SparseStore`;
- NCCL's unique id of a communicator is set in the store by the group's rank 0 (the lower rank of a
  point-to-point pair) and read by the others: when that rank is absent, :class:`SparseStore` answers with an id
  made from the key alone, which every present member computes the same way;
- the small-collective exchange (emulate/driver/csrc/datapath.c, communicators of 2 to 64 members made from a
  unique id) waits for every member: absent members are marked stopped in its shared-memory header before the
  communicator exists, so a present member's slot speaks for them (the layout below mirrors ``shm_header``);
- a gloo group with absent members cannot be created (gloo connects every pair of members through the store):
  that is refused with one line naming the group;
- torch's symmetric memory (async TP's fused collective-matmuls) rendezvous through the store: every member sets
  its request under ``.../CUDASymmetricMemory/<seq>/<group rank>`` (torch 2.6: ``store_all_gather/<seq>/<group
  rank>`` in a FileStore of the group's own, which is wrapped as it is handed to ``_SymmetricMemory.set_group_info``;
  its barrier all-gathers an int under the same keys; torch 2.8 on: under ``symmetric_memory-<the group's global
  ranks>/``, which names the members whichever group's store the key reaches) and reads the others then the members pass
  their blocks' file descriptors around a ring of Unix sockets named by the requests' process ids. An absent
  member's request is answered with this rank's own, its device (the request's first field) set to the absent
  rank's local device: the process id is this rank's, so its ring sends go to itself and it imports its own block
  as each absent peer's; at the exchange's barrier (members count in) this rank counts for the absent ones too.
  That holds where this rank is the group's only running member (one rank of each tensor-parallel group runs); a
  group with absent members and several running ones is refused in one line.

The records go to the rank's op table (``sparse``), from which the collator rebuilds the absent ranks
(:mod:`emulate.roles`)."""
from __future__ import annotations

import ctypes
import inspect
import mmap
import os
import re
from datetime import timedelta
from typing import Any

import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from stepcast.errors import UnavailableError

UNIQUE_ID_BYTES = 128               # NCCL_UNIQUE_ID_BYTES
NCCL_ID_PREFIX = b"stepcast-nccl"   # what the emulated ncclGetUniqueId writes (emulate/driver/csrc/nccl.c)
SHM_MAX_RANKS = 64                  # datapath.c MAX_RANKS
SHM_SLOT = 1 << 20                  # datapath.c SLOT
SHM_HEADER = 4096
SHM_STOPPED_OFFSET = 2 * SHM_MAX_RANKS * 8   # shm_header: posted[64], done[64], stopped[64], program[64]
COUNTER_KEY = re.compile(r"\d+")
P2P_KEY = re.compile(r"(\d+):(\d+)")
ROOT_KEY = re.compile(r"UniqueNCCLID:(\d+)")   # NCCL's scalable init (torch with NCCL 2.23 on): one id per root
RANKS_PER_ROOT = 128                              # TORCH_NCCL_RANKS_PER_ROOT's default
#: torch's symmetric-memory all-gather keys, <prefix>/<seq>/<rank>: StoreExchange's (torch 2.7 on), and 2.6's
#: store_all_gather (its barrier is an all-gather of an int, under the same keys)
SYMM_KEY = re.compile(r"^(.*(?:CUDASymmetricMemory|store_all_gather)/\d+/)(\d+)$")
SYMM_GROUP = re.compile(r"symmetric_memory-(\d+(?:_\d+)*)/")   # torch 2.8 on: the group's global ranks name the
                                                                # prefix of its symmetric memory's store
SYMM_COUNT = re.compile(r"CUDASymmetricMemory/\d+/num_members$")   # its barrier: members count in, the last sets
                                                                   # .../last_member, all wait for it
DEVICE_FIELD = 4                                                  # RendezvousRequest.device_idx, an int, first


class SparseRunError(UnavailableError):
    """Something a sparse run cannot emulate; the message is one line."""


def present_ranks() -> frozenset[int]:
    return frozenset(int(r) for r in os.environ["STEPCAST_RUN_RANKS"].split(",") if r)


def comm_id(unique_id: bytes) -> str:
    """The emulated NCCL's communicator id for a unique id: 64-bit FNV-1a of its 128 bytes (nccl.c ``id_key``)."""
    h = 0xcbf29ce484222325
    for b in unique_id[:UNIQUE_ID_BYTES].ljust(UNIQUE_ID_BYTES, b"\0"):
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"nccl-{h:016x}"


def root_rank(index: int, members: list[int]) -> int:
    """The member that sets root ``index``'s unique id in NCCL's scalable init: torch spreads ceil(n / ranks per
    root) roots over the n members as evenly as it can, the first n % roots of them one member apart more
    (ProcessGroupNCCL's getRootIndex, inverted)."""
    n = len(members)
    per_root = int(os.environ.get("TORCH_NCCL_RANKS_PER_ROOT", RANKS_PER_ROOT))
    roots = max(1, -(-n // max(per_root, 1)))
    each, extra = divmod(n, roots)
    at = index * (each + 1) if index < extra else extra * (each + 1) + (index - extra) * each
    return members[min(at, n - 1)]


def stand_in_unique_id(key: str) -> bytes:
    """The unique id of a communicator whose id-setting rank is absent: from the store key only."""
    return (NCCL_ID_PREFIX + b" sparse " + key.encode()[-100:]).ljust(UNIQUE_ID_BYTES, b"\0")


def mark_absent_members(comm: str, members: list[int], present: frozenset[int]) -> None:
    """Mark the absent members of a communicator stopped in its small-collective area (created here if no member
    has yet), so the exchange never waits for them."""
    run = os.environ.get("STEPCAST_RUN_ID")
    n = len(members)
    absent = [j for j, r in enumerate(members) if r not in present]
    if not run or not absent or not 2 <= n <= SHM_MAX_RANKS:
        return
    path = f"/dev/shm/stepcast-{run}-{comm}"
    size = SHM_HEADER + n * SHM_SLOT
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if os.fstat(fd).st_size < size:
            os.ftruncate(fd, size)
        with mmap.mmap(fd, SHM_HEADER) as header:
            for j in absent:
                header[SHM_STOPPED_OFFSET + 8 * j:SHM_STOPPED_OFFSET + 8 * (j + 1)] = (1).to_bytes(8, "little")
    finally:
        os.close(fd)


class SparseStore(dist.Store):
    """A process group's view of the rendezvous store that answers NCCL unique-id reads whose setter is absent
    (module docstring); everything else goes to the real store.

    torch keeps a process group's store on the C++ side only (the group's PrefixStore holds it), which does not keep
    this Python object alive: once collected, torch's calls into it fail ("Not implemented"), as a communicator
    made lazily at the first collective (torchtitan's) finds. Every instance is therefore kept for the process's
    life (:data:`_ALIVE`)."""

    _ALIVE: list["SparseStore"] = []

    def __init__(self, inner: dist.Store, group: str, members: list[int], present: frozenset[int],
                 comms: list[dict[str, Any]], dedicated: bool = False) -> None:
        """``dedicated``: the store is the group's symmetric memory's own (torch 2.6), so every key is the group's."""
        super().__init__()
        self._inner, self._group, self._members, self._present, self._comms = inner, group, members, present, comms
        self._dedicated = dedicated
        SparseStore._ALIVE.append(self)

    def _id_key(self, key: str) -> tuple[int, list[int]] | None:
        """(global rank that sets the key, the communicator's members) for a unique-id key of this group, else
        None. torch's key is ``<group>//<backend>//<counter>``; the world group's store also sees every subgroup's
        keys (``0//<subgroup>//cuda//0``), which are not its own: its members are not the communicator's."""
        parts = [p for p in key.split("/") if p]
        if parts and parts[0] == self._group:
            parts = parts[1:]
        if len(parts) > 2:
            return None
        last = key.rsplit("/", 1)[-1]
        root = ROOT_KEY.fullmatch(last)
        if root:
            return (root_rank(int(root[1]), self._members), self._members) if self._members else None
        if COUNTER_KEY.fullmatch(last):
            return (self._members[0], self._members) if self._members else None
        pair = P2P_KEY.fullmatch(last)
        if pair:
            a, b = sorted(int(x) for x in pair.groups())
            if b < len(self._members):
                return self._members[a], [self._members[a], self._members[b]]
        return None

    def _symmetric_members(self, key: str) -> list[int] | None:
        """The members of the group a symmetric-memory key belongs to: named in the key (torch 2.8 on prefixes the
        group's store with ``symmetric_memory-<its global ranks>``, under whichever group's store it reached),
        else this store's group when the key is its own; None otherwise."""
        named = SYMM_GROUP.search(key)
        if named:
            return [int(r) for r in named[1].split("_")]
        return self._members if self._own(key) else None

    def _symmetric_stand_in(self, key: str) -> bytes | None:
        """An absent member's value of a symmetric-memory all-gather key (module docstring), else None."""
        m = SYMM_KEY.match(key)
        members = self._symmetric_members(key) if m else None
        if members is None or int(m[2]) >= len(members) or members[int(m[2])] in self._present:
            return None
        own = self._inner.get(m[1] + str(members.index(self._sole_running(members))))
        if len(own) <= 2 * DEVICE_FIELD:                      # a barrier's all-gather of an int: the same value
            return own
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        device = members[int(m[2])] % max(local, 1)
        return device.to_bytes(DEVICE_FIELD, "little", signed=True) + own[DEVICE_FIELD:]

    def _own(self, key: str) -> bool:
        """Whether a symmetric-memory key is this group's: torch prefixes it with the group's name (the world
        group's store also sees every subgroup's keys, under the subgroup's name)."""
        if self._dedicated:
            return True
        rest = key[len(self._group):] if key.startswith(self._group) else key
        return rest.lstrip("/").startswith("CUDASymmetricMemory/")

    def _sole_running(self, members: list[int] | None = None) -> int:
        """The one running member of the group (``members``, default this store's), for symmetric memory's
        exchanges (module docstring)."""
        members = self._members if members is None else members
        running = [r for r in members if r in self._present]
        if len(running) != 1:
            raise SparseRunError(
                f"stepcast: symmetric memory in process group {self._group!r} (ranks {members[:8]}) with "
                f"absent members and several running ones ({running[:8]}): run one rank of the group or all of "
                "them (--run-ranks)")
        return running[0]

    def _note(self, key: str, value: bytes) -> None:
        id_key = self._id_key(key)
        if id_key is None or len(value) != UNIQUE_ID_BYTES or not value.startswith(NCCL_ID_PREFIX):
            return
        root = ROOT_KEY.search(key)
        if root and int(root[1]) > 0:   # the communicator is named by the first root's id (csrc/nccl.c)
            return
        comm = comm_id(value)
        self._comms.append({"comm": comm, "group": self._group, "key": "root" if root else key.rsplit("/", 1)[-1],
                            "members": id_key[1]})
        mark_absent_members(comm, id_key[1], self._present)

    def set(self, key: str, value: Any) -> None:
        data = value.encode() if isinstance(value, str) else bytes(value)
        self._note(key, data)
        self._inner.set(key, data)

    def get(self, key: str) -> bytes:
        stand_in = self._symmetric_stand_in(key)
        if stand_in is not None:
            return stand_in
        id_key = self._id_key(key)
        if id_key is not None and id_key[0] not in self._present:
            value = stand_in_unique_id(key)
        else:
            value = self._inner.get(key)
        self._note(key, value)
        return value

    def add(self, key: str, value: int) -> int:
        members = self._symmetric_members(key) if SYMM_COUNT.search(key) else None
        absent = sum(r not in self._present for r in members or ())
        if absent:   # a symmetric-memory barrier: the absent members arrive with this rank, its group's only one
            self._sole_running(members)
            value += absent
        return self._inner.add(key, value)

    def clone(self) -> "SparseStore":
        """A second client of the same store answering the same way: newer torch (2.14) clones a group's store where it
        hands it to another thread or group (C++, through the PrefixStore holding this one), and a Python store
        that does not say how fails there ("pure virtual function c10d::Store::clone")."""
        return SparseStore(self._inner.clone(), self._group, self._members, self._present, self._comms,
                           dedicated=self._dedicated)

    def compare_set(self, key: str, expected: Any, desired: Any) -> bytes:
        return self._inner.compare_set(key, expected, desired)

    def check(self, keys: list[str]) -> bool:
        return self._inner.check(self._real_keys(keys))

    def _real_keys(self, keys: list[str]) -> list[str]:
        """The keys a running member sets (an absent member's symmetric-memory key is answered here)."""
        return [k for k in keys if self._symmetric_stand_in(k) is None]

    def delete_key(self, key: str) -> bool:
        return self._inner.delete_key(key)

    def num_keys(self) -> int:
        return self._inner.num_keys()

    def set_timeout(self, timeout: timedelta) -> None:
        self._inner.set_timeout(timeout)

    def wait(self, keys: list[str], timeout: timedelta | None = None) -> None:
        keys = self._real_keys(keys)
        if not keys:
            return
        if timeout is None:
            self._inner.wait(keys)
        else:
            self._inner.wait(keys, timeout)


def install(driver: ctypes.CDLL) -> dict[str, Any]:
    """Wrap torch's process-group creation (module docstring); returns the record the op table keeps. The newest
    communicator's id comes from the preloaded NCCL (emulate/driver/csrc/nccl.c), found in the global scope."""
    present = present_ranks()
    record: dict[str, Any] = {"run_ranks": sorted(present), "groups": [], "comms": []}
    nccl = ctypes.CDLL(None)
    nccl.stepcast_last_comm.argtypes = [ctypes.c_char_p, ctypes.c_int]
    nccl.stepcast_last_comm.restype = ctypes.c_int
    buf = ctypes.create_string_buffer(64)

    def last_comm() -> str:
        nccl.stepcast_last_comm(buf, len(buf))
        return buf.value.decode()

    original = c10d._new_process_group_helper
    signature = inspect.signature(original)

    def helper(*args: Any, **kwargs: Any):
        bound = signature.bind(*args, **kwargs)
        a = bound.arguments
        members = list(a["global_ranks_in_group"]) or list(range(int(a["group_size"])))
        name = str(a["group_name"])
        absent = [r for r in members if r not in present]
        if absent and "gloo" in str(a["backend"]).lower():
            raise SparseRunError(
                f"stepcast: process group {name!r} (ranks {members[:8]}{'...' if len(members) > 8 else ''}) uses "
                f"gloo, which connects every member through the store, and ranks {absent[:8]} do not run in this "
                "sparse run (--run-ranks): use NCCL-only groups (init_process_group('nccl'); Megatron: "
                "create_gloo_process_groups=False) or run every rank")
        a["store"] = SparseStore(a["store"], name, members, present, record["comms"])
        before = last_comm()
        out = original(*bound.args, **bound.kwargs)
        after = last_comm()
        record["groups"].append({"name": name, "ranks": members, "desc": a.get("group_desc"),
                                 "comm": after if after != before and a["group_rank"] is not None else None})
        return out

    c10d._new_process_group_helper = helper
    _wrap_symmetric_memory_stores(present, record)
    return record


class _GroupInfoProxy:
    """torch 2.6's ``_SymmetricMemory`` as its module sees it: ``set_group_info`` gets the group's store wrapped in a
    dedicated :class:`SparseStore`; every other attribute is the real class's."""

    def __init__(self, real: Any, present: frozenset[int], record: dict[str, Any]) -> None:
        self._real, self._present, self._record = real, present, record

    def set_group_info(self, group_name: str, rank: int, size: int, store: dist.Store) -> None:
        members = sorted(c10d._world.pg_group_ranks[c10d._resolve_process_group(group_name)].keys())
        if any(r not in self._present for r in members):
            store = SparseStore(store, group_name, members, self._present, self._record["comms"], dedicated=True)
        self._real.set_group_info(group_name, rank, size, store)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def _wrap_symmetric_memory_stores(present: frozenset[int], record: dict[str, Any]) -> None:
    """torch 2.6 gives each group's symmetric memory a FileStore of its own (``enable_symm_mem_for_group``), out
    of the process group's store: wrap it as it is handed over (module docstring). Later torch exchanges through
    the group's store, which is already wrapped."""
    try:
        from torch.distributed import _symmetric_memory as symm
    except ImportError:
        return
    enable = getattr(symm, "enable_symm_mem_for_group", None)
    try:
        uses_file_store = enable is not None and "FileStore" in inspect.getsource(enable)
    except (OSError, TypeError):
        uses_file_store = False
    if uses_file_store and not isinstance(getattr(symm, "_SymmetricMemory", None), _GroupInfoProxy):
        symm._SymmetricMemory = _GroupInfoProxy(symm._SymmetricMemory, present, record)
