"""The simulation proper: host threads issue work in program order, streams run it in FIFO order, ranks meet at
collectives.

Model (design notes, "Collation and simulation"):

- the host of a rank advances by each event's gap (settled by :mod:`emulate.sim.host`: CPU time, runtime-call
  costs, host speed) and issues the event at that time; device work does not hold the host (launch overhead
  overlaps execution) until ``queue_depth`` device ops it issued are unfinished: then the launch blocks until the
  oldest of them ends (CUDA's bounded pending-launch queue, :data:`emulate.config.LAUNCH_QUEUE_DEPTH`), so a host
  that runs ahead is throttled to its GPU's pace;
- a device op starts at ``max(issue time + launch latency, its stream's tail) + stall`` (``stall_us``: a hold the
  importer measured but could not explain, 0 for captured traces) and occupies its stream for its duration;
  different streams overlap, except that kernels which fill the GPU (``Durations.fills``: predicted, their blocks
  taking more than half its block slots) share it: such a kernel runs in the time its rank's earlier ones leave free
  from when it is ready, so it ends its duration of free time later (:func:`_share`: the GPU works one at a time,
  interleaving their blocks); a copy engine's copies, collectives and kernels too small to fill the GPU overlap freely
  (the SMs a collective holds are taken from the kernels beside it before this run: :mod:`emulate.sim.contention`);
- ``event_record`` stores the stream's tail; ``stream_wait_event`` raises the waiting stream's tail to the stored
  time (the latest record of that handle before the wait in host order: exactly CUDA's semantics, which is what
  keying waiters by (handle, record version) achieves in a queue-based simulator);
- ``event_sync`` / ``stream_sync`` / ``device_sync`` / a blocking memcpy hold the host until the awaited work ends;
- a collective matched across ranks (see :func:`emulate.sim.collate.collate`) starts when the last member's stream
  reaches it and ends, on every member, ``duration`` later; an unmatched one (ranks absent from the traces) runs
  alone;
- the collectives a rank issued inside one ncclGroupStart/ncclGroupEnd batch (trace field ``group``, e.g. torch's
  ``batch_isend_irecv``: a pipeline stage's send and recv) are one unit, as NCCL launches them: one fused kernel
  enqueued at the group's end, so the unit starts when its last member is issued and every stream it uses has
  reached it; its members progress concurrently, each matched with its peers as above, except that members sharing
  a link (sends to one peer, receives from one peer, collectives on one communicator) take turns in issue order;
  the unit ends, on every stream it uses, when its last member ends. Serialising a group's members on its stream
  instead would make a send wait for a recv its peer issues only after its own send: a deadlock NCCL never has;
- an alignment marker (:mod:`emulate.sim.host`: the first steady-state iteration boundary of captured ranks) is a
  barrier: the host waits for its own device work, then for every other rank's, and all resume together.

Why no priority queue: within one rank every time is a function of events earlier in host order (a stream's
predecessors, records issued before a wait, work issued before a sync), so evaluating events in host order IS the
discrete-event schedule, at a fraction of the cost of pushing and popping a heap per event. Ranks interact only at
collectives: a rank runs until it touches a stream whose collective still waits for peers, then yields to the
others; when the last member arrives, the collective's end is known and the waiting ranks resume. The outcome does
not depend on the order in which ranks are run (each value is computed once, from the same inputs), and a cycle of
ranks waiting on each other is a real deadlock of the traced program, reported as such.
"""
from __future__ import annotations

import bisect
import functools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from stepcast.emulate import config
from stepcast.emulate.sim.collate import CollectiveGroup
from stepcast.emulate.sim.durations import Durations
from stepcast.emulate.sim.host import RankSetup
from stepcast.emulate.sim.program import (
    COLLECTIVE, DEVICE_SYNC, EVENT_RECORD, EVENT_SYNC, MEMCPY_BLOCKING, STREAM_SYNC, STREAM_WAIT_EVENT, RankProgram,
)
from stepcast.errors import InputError

PENDING = -1.0  # a stream tail that waits for a collective's peers


class SimulationDeadlock(InputError):
    """Ranks wait on each other's collectives in an order that can never complete."""


@dataclass
class RankTimeline:
    """Simulated times (us since the rank's trace began) of every event of one rank.

    ``host[i]``: when the host issued event i (derived on first use). Device events: ``start``/``end`` on their
    stream. Synchronising events: ``start`` = when the host began to wait, ``end`` = when it resumed. Event records:
    ``end`` = when the GPU reached the record (its stream's earlier work done and the record issued: on an idle
    stream, issue time + launch latency), the time ``cudaEventElapsedTime`` subtracts; what a later wait or sync on
    the event awaits is the stream's earlier work alone (the host is past the record by then). Collectives
    matched across ranks also have ``arrival`` (their stream reached them; they started when the last member did).
    """

    start: np.ndarray
    end: np.ndarray
    arrival: dict[int, float]
    end_time: float
    derive_host: Callable[[], np.ndarray] = field(repr=False)

    host_recorded: dict[int, float] = field(default_factory=dict, repr=False)  # host times the loop stored (us)
    gap_us: np.ndarray | None = field(default=None, repr=False)  # effective host gap before each event (us)

    @functools.cached_property
    def host(self) -> np.ndarray:
        return self.derive_host()

    def host_of(self, positions: np.ndarray) -> np.ndarray:
        """Host times of some events; cheap for events other than plain device ops (iteration markers, syncs)."""
        recorded = self.host_recorded
        if all(int(i) in recorded for i in positions):
            return np.array([recorded[int(i)] for i in positions], dtype=np.float64)
        return self.host[positions]


class _Barrier:
    """The alignment barrier: every rank's host and devices meet at it once (module docstring)."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.arrived = 0
        self.time = 0.0
        self.members: list[int] = []

    @property
    def done(self) -> bool:
        return self.arrived >= self.expected


class _Unit:
    """The collectives one rank issued in one NCCL group (module docstring). ``lanes``: members that share a link,
    in issue order (they take turns); lanes progress concurrently."""

    def __init__(self, members: list[int], streams: list[int], lanes: list[list[int]]) -> None:
        self.members = members
        self.last = members[-1]
        self.streams = streams
        self.lanes = lanes
        self.next_in_lane = {pos: (lane[j + 1] if j + 1 < len(lane) else -1)
                             for lane in lanes for j, pos in enumerate(lane)}
        self.remaining = 0
        self.end = 0.0


def group_units(prog: RankProgram) -> dict[int, _Unit]:
    """Each grouped collective's unit, keyed by the positions of its members (groups of one member are plain
    collectives and get none). The lane of a member: point-to-point ops by (direction, communicator, peer),
    collectives by communicator, as NCCL's channels to one peer, or of one communicator, are shared."""
    by_group: dict[object, list[int]] = {}
    events = prog.events
    for i in np.flatnonzero(prog.kind_array == COLLECTIVE).tolist():
        g = events[i].get("group")
        if g is not None:
            by_group.setdefault(g, []).append(i)
    units: dict[int, _Unit] = {}
    for members in by_group.values():
        if len(members) < 2:
            continue
        lanes: dict[tuple, list[int]] = {}
        for i in members:
            ev = events[i]
            op = ev.get("op")
            key = (op, ev.get("comm"), ev.get("peer")) if op in ("send", "recv") else ("coll", ev.get("comm"))
            lanes.setdefault(key, []).append(i)
        unit = _Unit(members, sorted({prog.stream[i] for i in members}), list(lanes.values()))
        for i in members:
            units[i] = unit
    return units


class _RankState:
    """Mutable state of one rank between runs (a rank yields while a collective waits for its peers). Times are
    nanoseconds here (the trace's unit for gaps, so the hot loop adds them without conversion)."""

    def __init__(self, index: int, prog: RankProgram, dur: np.ndarray, group_of: list[int], setup: RankSetup,
                 queue_depth: int, fills: np.ndarray | None = None) -> None:
        n = prog.n_events
        self.index = index
        self.prog = prog
        self.n = n
        self.kind = prog.kind
        self.gap = setup.gap_ns
        self.stream = prog.stream
        self.handle = prog.handle
        self.stall = prog.stall_ns
        self.dur_array = dur * 1e3       # the loop counts nanoseconds, as the trace's gaps do
        self.dur = self.dur_array.tolist()
        self.fills = fills.tolist() if fills is not None and fills.any() else None
        self.busy_start: list[float] = []  # the rank's GPU-filling kernels so far: disjoint busy spans, in order
        self.busy_end: list[float] = []
        self.group_of = group_of
        self.latency = setup.latency_us * 1e3
        self.align_at = setup.align_at
        self.at_barrier = False
        self.host: dict[int, float] = {}   # only events other than plain device ops (see _timeline)
        self.start: dict[int, float] = {}  # likewise
        self.end = [0.0] * n
        self.tail = [0.0] * max(1, len(prog.stream_ids))
        self.event_time = [0.0] * (max(prog.handle, default=-1) + 1)
        self.arrival: dict[int, float] = {}
        self.unit_of = group_units(prog)
        self.depth = queue_depth
        self.ring = [0] * queue_depth      # positions of the last queue_depth device ops issued
        self.issued = 0
        self.origin = self.h = setup.start_us * 1e3
        self.i = 0


def run(programs: list[RankProgram], durations: Durations, group_of: list[list[int]],
        groups: list[CollectiveGroup], setups: list[RankSetup],
        queue_depth: int | None = None) -> list[RankTimeline]:
    """Simulate every rank; see the module docstring. ``setups``: per rank, from :func:`emulate.sim.host.plan`;
    ``queue_depth`` None: :data:`emulate.config.LAUNCH_QUEUE_DEPTH`."""
    if queue_depth is None:
        queue_depth = config.LAUNCH_QUEUE_DEPTH
    if queue_depth < 1:
        raise ValueError(f"queue_depth: expected a positive number of device ops, found {queue_depth}")
    for grp in groups:  # a run starts with no member arrived, whatever an earlier run of these groups left
        grp.arrived, grp.last_arrival = 0, 0.0
    states = [_RankState(r, p, durations.us[r], group_of[r], setups[r], queue_depth,
                         durations.fills[r] if durations.fills else None)
              for r, p in enumerate(programs)]
    barrier = _Barrier(sum(1 for s in states if s.align_at >= 0))
    runnable = deque(states)
    queued = {id(s) for s in states}
    while runnable:
        st = runnable.popleft()
        queued.discard(id(st))
        woken: list[int] = []
        _advance(st, states, groups, barrier, woken)
        for r in woken:
            other = states[r]
            if other.i < other.n and id(other) not in queued:
                runnable.append(other)
                queued.add(id(other))
    stuck = [s for s in states if s.i < s.n]
    if stuck:
        raise SimulationDeadlock("; ".join(_describe_stuck(s, groups) for s in stuck))
    return [_timeline(st) for st in states]


def _advance(st: _RankState, states: list[_RankState], groups: list[CollectiveGroup], barrier: _Barrier,
             woken: list[int]) -> None:
    """Run one rank's events in host order until the end or until one touches a stream held by a collective that
    still waits for peers (or waits at the alignment barrier). The hot loop: locals only, the common kinds tested
    first."""
    kind, gap, stream, handle, dur, stall = st.kind, st.gap, st.stream, st.handle, st.dur, st.stall
    host, start, end, tail, event_time = st.host, st.start, st.end, st.tail, st.event_time
    lat = st.latency
    unit_of = st.unit_of
    fills = st.fills
    ring, depth, issued, align_at = st.ring, st.depth, st.issued, st.align_at
    h = st.h
    i = st.i
    for i in range(st.i, st.n):
        k = kind[i]
        t = h + gap[i]
        if k < MEMCPY_BLOCKING:  # kernel, memcpy, memset: the bulk of every trace, kept to the bare minimum
            s = stream[i]
            q = tail[s]
            if q < 0.0:
                break
            if issued >= depth:  # the launch queue is full: wait for the oldest op still in it
                e = end[ring[issued % depth]]
                if e < 0.0:
                    break  # ... a collective still waiting for its peers
                if e > t:
                    t = e
                    host[i] = t
            ring[issued % depth] = i
            issued += 1
            b = t + lat
            if q > b:
                b = q
            if fills is not None and fills[i]:
                q = _share(st.busy_start, st.busy_end, b + stall[i], dur[i])
            else:
                q = b + stall[i] + dur[i]
            end[i] = q             # start and host time are derived afterwards (_timeline)
            tail[s] = q
        elif k > COLLECTIVE + 2:  # host-side kinds (record, wait, syncs, iteration)
            if i == align_at:
                if not st.at_barrier:
                    if min(tail) < 0.0:
                        break
                    st.at_barrier = True
                    _arrive_barrier(barrier, max(t, max(tail)), st.index, woken)
                if not barrier.done:
                    break
                if barrier.time > t:
                    t = barrier.time
            host[i] = t
            if k == EVENT_RECORD:
                q = tail[stream[i]]
                if q < 0.0:
                    break
                event_time[handle[i]] = q
                b = t + lat
                end[i] = q if q > b else b  # when the GPU reached it: what cudaEventElapsedTime measures between two
            elif k == STREAM_WAIT_EVENT:
                s = stream[i]
                q = tail[s]
                if q < 0.0:
                    break
                e = event_time[handle[i]]
                if e > q:
                    tail[s] = e
            elif k == EVENT_SYNC:
                start[i] = t
                e = event_time[handle[i]]
                if e > t:
                    t = e
                end[i] = t
            elif k == STREAM_SYNC:
                q = tail[stream[i]]
                if q < 0.0:
                    break
                start[i] = t
                if q > t:
                    t = q
                end[i] = t
            elif k == DEVICE_SYNC:
                if min(tail) < 0.0:
                    break
                start[i] = t
                q = max(tail)
                if q > t:
                    t = q
                end[i] = t
            # ITERATION: only its host time matters
        elif k <= COLLECTIVE:  # a blocking memcpy or a collective: the host waits on it, or peers do
            unit = unit_of.get(i) if k == COLLECTIVE else None
            s = stream[i]
            if unit is None:
                q = tail[s]
            elif i != unit.last:   # enqueued with the group's last member (ncclGroupEnd)
                host[i] = t
                h = t
                continue
            else:
                q = min(tail[x] for x in unit.streams)
                if q >= 0.0:
                    q = max(tail[x] for x in unit.streams)
            if q < 0.0:
                break
            if issued >= depth:
                e = end[ring[issued % depth]]
                if e < 0.0:
                    break
                if e > t:
                    t = e
            ring[issued % depth] = i
            issued += 1
            host[i] = t
            b = t + lat
            if q > b:
                b = q
            b += stall[i]
            g = st.group_of[i] if k == COLLECTIVE else -1
            if unit is not None:
                _launch_unit(st, unit, b, states, groups, woken)
            elif g < 0:
                start[i] = b
                q = b + dur[i]
                end[i] = q
                tail[s] = q
                if k == MEMCPY_BLOCKING and q > t:
                    t = q
            else:
                st.arrival[i] = b
                tail[s] = PENDING
                end[i] = PENDING  # until the last member arrives (the launch queue may wait on it)
                _arrive(groups[g], b, states, groups, woken)
        else:  # MALLOC / FREE: memory is settled before simulation (RankProgram.peak_memory_bytes)
            host[i] = t
        h = t
    else:
        i = st.n
    st.h = h
    st.i = i
    st.issued = issued


def _share(starts: list[float], ends: list[float], ready: float, duration: float) -> float:
    """When a GPU-filling kernel ready at ``ready`` ends: after ``duration`` of time its rank's earlier ones
    (``starts``/``ends``: disjoint busy spans, in order) leave free. The spans it waits through and the free time it
    uses become one busy span. Kernels mostly come in time order, so the common case appends."""
    if duration <= 0.0:
        return ready
    k = bisect.bisect_right(ends, ready)          # spans before k ended by ``ready``
    n = len(starts)
    if k == n:
        if n and ends[-1] == ready:
            ends[-1] = ready + duration
        else:
            starts.append(ready)
            ends.append(ready + duration)
        return ready + duration
    first = starts[k] if starts[k] < ready else ready
    t, left, j = ready, duration, k
    if starts[j] <= t:                              # ready inside a busy span: free when it ends
        t = ends[j]
        j += 1
    while j < n and starts[j] - t < left:          # the gap before span j is too short: use it, wait through j
        left -= starts[j] - t
        t = ends[j]
        j += 1
    finish = t + left
    if j < n and starts[j] == finish:              # touches the next span: one span
        finish_span = ends[j]
        j += 1
    else:
        finish_span = finish
    starts[k:j] = [first]
    ends[k:j] = [finish_span]
    return finish


def _timeline(st: _RankState) -> RankTimeline:
    """The rank's times in us. The hot loop stores only the end of plain device ops: their start is end -
    duration, and the host issued op i at the resume time of the last other event before it plus the gaps since
    (the host waits only at those other events and at launches the full queue held, which the loop stores); host
    times are derived only when asked for."""
    kind = st.prog.kind_array
    end = np.asarray(st.end, dtype=np.float64)
    start = end - st.dur_array
    for i, b in st.start.items():
        start[i] = b
    device = st.prog.device_index
    device_end = float(end[device].max()) * 1e-3 if len(device) else 0.0
    host_at, gap, origin = dict(st.host), st.gap, st.origin

    def derive_host() -> np.ndarray:
        host = np.zeros(len(kind))
        anchors = np.fromiter(host_at.keys(), dtype=np.int64, count=len(host_at))
        order = np.argsort(anchors)
        anchors = anchors[order]
        recorded = np.fromiter(host_at.values(), dtype=np.float64, count=len(host_at))[order]
        plain = np.flatnonzero(kind < MEMCPY_BLOCKING)
        cumulative = np.cumsum(np.asarray(gap, dtype=np.float64))
        if len(anchors):
            akind = kind[anchors]
            resume = np.where(np.isin(akind, (EVENT_SYNC, STREAM_SYNC, DEVICE_SYNC)), end[anchors], recorded)
            resume = np.where(akind == MEMCPY_BLOCKING, np.maximum(recorded, end[anchors]), resume)
            last = np.maximum(np.searchsorted(anchors, plain) - 1, 0)
            before = anchors[last] < plain
            host[plain] = np.where(before, resume[last] - cumulative[anchors[last]], origin) + cumulative[plain]
            host[anchors] = recorded   # launches the full queue held keep the time they were issued
        else:
            host[plain] = origin + cumulative[plain]
        return host * 1e-3

    return RankTimeline(start=start * 1e-3, end=end * 1e-3, arrival={i: a * 1e-3 for i, a in st.arrival.items()},
                        end_time=max(st.h * 1e-3, device_end), derive_host=derive_host,
                        host_recorded={i: t * 1e-3 for i, t in host_at.items()},
                        gap_us=np.asarray(gap, dtype=np.float64) * 1e-3)


def _arrive_barrier(barrier: _Barrier, when: float, rank: int, woken: list[int]) -> None:
    barrier.arrived += 1
    barrier.members.append(rank)
    if when > barrier.time:
        barrier.time = when
    if barrier.done:
        woken.extend(barrier.members)


def _arrive(grp: CollectiveGroup, when: float, states: list[_RankState], groups: list[CollectiveGroup],
            woken: list[int]) -> None:
    grp.arrived += 1
    if when > grp.last_arrival:
        grp.last_arrival = when
    if grp.arrived < grp.expected:
        return
    begin = grp.last_arrival
    finish = begin + grp.duration_ns
    for r, pos in grp.members:
        st = states[r]
        st.start[pos] = begin
        unit = st.unit_of.get(pos)
        if unit is None:
            st.end[pos] = finish
            st.tail[st.stream[pos]] = finish
        else:
            _member_done(st, unit, pos, finish, states, groups, woken)
        woken.append(r)


def _launch_unit(st: _RankState, unit: _Unit, begin: float, states: list[_RankState],
                 groups: list[CollectiveGroup], woken: list[int]) -> None:
    """A group's fused launch reaches its streams at ``begin``: the first member of every lane starts (arrives at
    its collective); the streams are held until the last member ends."""
    unit.remaining = len(unit.members)
    unit.end = begin
    for x in unit.streams:
        st.tail[x] = PENDING
    for pos in unit.members:
        st.end[pos] = PENDING
    for lane in unit.lanes:
        _start_member(st, unit, lane[0], begin, states, groups, woken)


def _start_member(st: _RankState, unit: _Unit, pos: int, when: float, states: list[_RankState],
                  groups: list[CollectiveGroup], woken: list[int]) -> None:
    g = st.group_of[pos]
    if g < 0:  # its peers' traces are absent: it runs alone
        st.start[pos] = when
        _member_done(st, unit, pos, when + st.dur[pos], states, groups, woken)
    else:
        st.arrival[pos] = when
        _arrive(groups[g], when, states, groups, woken)


def _member_done(st: _RankState, unit: _Unit, pos: int, finish: float, states: list[_RankState],
                 groups: list[CollectiveGroup], woken: list[int]) -> None:
    """One member of a unit ended: the next member of its lane starts; the last one releases the streams."""
    st.end[pos] = finish
    if finish > unit.end:
        unit.end = finish
    unit.remaining -= 1
    following = unit.next_in_lane[pos]
    if following >= 0:
        _start_member(st, unit, following, finish, states, groups, woken)
    if unit.remaining == 0:
        for x in unit.streams:
            st.tail[x] = unit.end
        woken.append(st.index)


def _describe_stuck(st: _RankState, groups: list[CollectiveGroup]) -> str:
    ev = st.prog.events[st.i]
    waiting = [g for g in groups if g.arrived < g.expected and any(r == st.index for r, _ in g.members)]
    detail = ", ".join(f"{g.key[1:]} ({g.arrived}/{g.expected} arrived)" for g in waiting[:3])
    return (f"{st.prog.source}: rank {st.prog.rank} is stuck at events[{st.i}] (kind {ev.get('kind')!r}) behind "
            f"collective(s) {detail or '?'} that never complete (the traces' collective orders disagree)")
