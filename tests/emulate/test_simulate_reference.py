"""The host-order engine against a textbook discrete-event simulator (priority queue, busy streams with FIFO
queues, event markers keyed by record version, blocked hosts re-checked on every completion, a bounded launch
queue, an alignment barrier, NCCL groups launched as one unit at their last member whose members take turns per
link and progress concurrently across links) on random traces: both must give every device op the same start and
end and every iteration marker the same host time.

The reference below is written for clarity, not speed, and shares nothing with the engine but its inputs (the
programs, the durations and the matched collectives)."""
from __future__ import annotations

import heapq
import itertools
import random
from collections import deque

import numpy as np
import pytest

from stepcast.emulate.sim.durations import assign_durations
from stepcast.emulate.sim.collate import collate
from stepcast.emulate.sim.engine import run
from stepcast.emulate.sim.host import plan as host_plan
from stepcast.emulate.sim.program import (
    COLLECTIVE, DEVICE_SYNC, EVENT_RECORD, EVENT_SYNC, ITERATION, MEMCPY_BLOCKING, STREAM_SYNC, STREAM_WAIT_EVENT,
    build_program,
)
from stepcast.emulate.sim.synthetic import TraceBuilder
from stepcast.profiling.hardware import lookup

LATENCY_US = 2.0


class ReferenceDES:
    def __init__(self, programs, durations, group_of, groups, depth, align_at):
        self.p, self.dur, self.group_of, self.groups = programs, durations.us, group_of, groups
        self.depth, self.align_at = depth, align_at
        self.device_issued = [[] for _ in programs]     # positions of the device ops each host issued, in order
        self.at_barrier = []                            # (rank, time its host and streams were ready)
        self.heap, self.tick = [], itertools.count()
        n = len(programs)
        self.start = [np.zeros(p.n_events) for p in programs]
        self.end = [np.zeros(p.n_events) for p in programs]
        self.host = [np.zeros(p.n_events) for p in programs]
        self.pc = [0] * n
        self.blocked = [None] * n                       # a predicate on the rank's state, or None
        self.queue = [dict() for _ in programs]         # stream -> deque of (position, payload)
        self.busy = [dict() for _ in programs]          # stream -> bool
        self.issued = [dict() for _ in programs]        # event handle -> last record version issued
        self.done = [set() for _ in programs]           # (event handle, record version) completed
        self.pending_op = [dict() for _ in programs]    # blocking memcpy position -> finished?
        self.arrivals = {}                              # group -> list of (rank, position, stream, time)
        self.units = [self.find_units(p) for p in programs]   # position -> its NCCL group's state (2+ members)

    @staticmethod
    def find_units(prog):
        """The collectives of each NCCL group (trace field ``group``) with two or more members, and their lanes:
        sends to one peer, recvs from one peer, collectives of one communicator."""
        members = {}
        for i, ev in enumerate(prog.events):
            if ev["kind"] == "collective" and ev.get("group") is not None:
                members.setdefault(ev["group"], []).append(i)
        units = {}
        for positions in members.values():
            if len(positions) < 2:
                continue
            lanes = {}
            for i in positions:
                ev = prog.events[i]
                link = (ev["op"], ev["comm"], ev.get("peer")) if ev["op"] in ("send", "recv") else ev["comm"]
                lanes.setdefault(link, []).append(i)
            unit = {"last": positions[-1], "lanes": list(lanes.values()), "left": len(positions)}
            for i in positions:
                units[i] = unit
        return units

    def at(self, t, fn, *args):
        heapq.heappush(self.heap, (t, next(self.tick), fn, args))

    def run(self):
        for r in range(len(self.p)):
            self.at(0.0, self.host_next, r)
        while self.heap:
            t, _, fn, args = heapq.heappop(self.heap)
            fn(t, *args)

    # host -------------------------------------------------------------------------------------------------------
    def host_next(self, t, r):
        i = self.pc[r]
        if i < self.p[r].n_events:
            self.at(t + self.p[r].gap_ns[i] / 1e3, self.issue, r, i)

    def issue(self, t, r, i):
        p, k = self.p[r], self.p[r].kind[i]
        unit = self.units[r].get(i)
        if unit is not None and i != unit["last"]:   # NCCL launches the group at ncclGroupEnd
            self.host[r][i] = t
            self.pc[r] = i + 1
            return self.host_next(t, r)
        if k <= COLLECTIVE:
            issued = self.device_issued[r]
            if len(issued) >= self.depth and self.end[r][issued[-self.depth]] == 0:
                oldest = issued[-self.depth]   # the launch queue is full until the oldest op in it ends
                return self.block(t, r, lambda: self.end[r][oldest] > 0, lambda t2: self.issue(t2, r, i))
            issued.append(i)
        if i == self.align_at[r] and not any(a[0] == r for a in self.at_barrier):
            return self.block(t, r, lambda: all(self.stream_idle(r, x) for x in self.queue[r]),
                              lambda t2: self.arrive_at_barrier(t2, r, i))
        self.host[r][i] = t
        self.pc[r] = i + 1
        s, h = p.stream[i], p.handle[i]
        q = self.queue[r].setdefault(s, deque()) if s >= 0 else None
        if unit is not None:
            q.append((i, ("unit", unit, t + LATENCY_US)))
            self.try_stream(t, r, s)
        elif k <= COLLECTIVE:
            q.append((i, t + LATENCY_US))
            self.try_stream(t, r, s)
            if k == MEMCPY_BLOCKING:
                return self.block(t, r, lambda: self.end[r][i] > 0 and self.busy_free(r, i, s))
        elif k == EVENT_RECORD:
            self.issued[r][h] = self.issued[r].get(h, 0) + 1
            q.append((i, ("record", h, self.issued[r][h])))
            self.try_stream(t, r, s)
        elif k == STREAM_WAIT_EVENT:
            q.append((i, ("wait", h, self.issued[r].get(h, 0))))
            self.try_stream(t, r, s)
        elif k == EVENT_SYNC:
            v = self.issued[r].get(h, 0)
            return self.block(t, r, lambda: self.complete(r, h, v))
        elif k == STREAM_SYNC:
            return self.block(t, r, lambda: self.stream_idle(r, s))
        elif k == DEVICE_SYNC:
            return self.block(t, r, lambda: all(self.stream_idle(r, x) for x in self.queue[r]))
        self.host_next(t, r)

    def block(self, t, r, ready, resume=None):
        self.blocked[r] = (ready, resume)
        self.recheck_host(t, r)

    def recheck_host(self, t, r):
        if self.blocked[r] is not None and self.blocked[r][0]():
            resume = self.blocked[r][1]
            self.blocked[r] = None
            (resume or (lambda t2: self.host_next(t2, r)))(t)

    def arrive_at_barrier(self, t, r, i):
        self.at_barrier.append((r, t))
        members = sum(1 for a in self.align_at if a >= 0)
        if len(self.at_barrier) == members:
            go = max(a[1] for a in self.at_barrier)
            for rr, _ in self.at_barrier:
                self.at(go, self.issue, rr, self.align_at[rr])

    def complete(self, r, h, v):
        """Has record version v of event h completed? (version 0: never recorded, complete by definition)"""
        return v == 0 or (h, v) in self.done[r]

    def stream_idle(self, r, s):
        return not self.queue[r].get(s) and not self.busy[r].get(s)

    def busy_free(self, r, i, s):
        return not self.queue[r].get(s) or self.queue[r][s][0][0] != i

    # streams ----------------------------------------------------------------------------------------------------
    def try_stream(self, t, r, s):
        q = self.queue[r][s]
        while q and not self.busy[r].get(s):
            i, payload = q[0]
            if isinstance(payload, tuple) and payload[0] == "unit":
                _, unit, ready = payload
                if ready > t:
                    self.at(ready, self.try_stream, r, s)
                    return
                self.busy[r][s] = True
                for lane in unit["lanes"]:
                    self.start_member(t + self.p[r].stall_ns[i] / 1e3, r, lane[0])
                return
            if isinstance(payload, tuple):
                what, h, v = payload
                if what == "record":
                    self.done[r].add((h, v))
                    q.popleft()
                    for other in list(self.queue[r]):
                        if other != s:
                            self.at(t, self.try_stream, r, other)
                    self.recheck_host(t, r)
                    continue
                if not self.complete(r, h, v):
                    return  # re-tried when a record of h completes
                q.popleft()
                self.recheck_host(t, r)
                continue
            if payload > t:
                self.at(payload, self.try_stream, r, s)
                return
            begin = t + self.p[r].stall_ns[i] / 1e3
            self.busy[r][s] = True
            g = self.group_of[r][i]
            if self.p[r].kind[i] == COLLECTIVE and g >= 0:
                arrived = self.arrivals.setdefault(g, [])
                arrived.append((r, i, s, begin))
                self.release_if_complete(g)
                return
            self.start[r][i] = begin
            self.at(begin + self.dur[r][i], self.finish, r, i, s)
            return

    def release_if_complete(self, g):
        arrived = self.arrivals[g]
        if len(arrived) == self.groups[g].expected:
            go = max(a[3] for a in arrived)
            for rr, ii, ss, _ in arrived:
                self.start[rr][ii] = go
                done = self.finish_member if ii in self.units[rr] else self.finish
                self.at(go + self.groups[g].duration_ns / 1e3, done, rr, ii, ss)

    def start_member(self, t, r, i):
        """A member of a launched group begins: it meets its peers, or runs alone when it has none."""
        g, s = self.group_of[r][i], self.p[r].stream[i]
        if g >= 0:
            self.arrivals.setdefault(g, []).append((r, i, s, t))
            self.release_if_complete(g)
        else:
            self.start[r][i] = t
            self.at(t + self.dur[r][i], self.finish_member, r, i, s)

    def finish_member(self, t, r, i, s):
        self.end[r][i] = t
        unit = self.units[r][i]
        lane = next(lane for lane in unit["lanes"] if i in lane)
        if lane.index(i) + 1 < len(lane):
            self.start_member(t, r, lane[lane.index(i) + 1])
        unit["left"] -= 1
        if unit["left"] == 0:
            self.queue[r][s].popleft()
            self.busy[r][s] = False
            self.try_stream(t, r, s)
            self.recheck_host(t, r)
        else:
            self.recheck_host(t, r)   # the launch queue may wait on this member

    def finish(self, t, r, i, s):
        self.end[r][i] = t
        self.queue[r][s].popleft()
        self.busy[r][s] = False
        self.try_stream(t, r, s)
        self.recheck_host(t, r)


def random_traces(seed: int, ranks: int) -> list[dict]:
    rng = random.Random(seed)
    plan = [rng.random() for _ in range(rng.randint(40, 120))]
    docs = []
    for rank in range(ranks):
        b = TraceBuilder(rank=rank, world_size=ranks, meta={"launch_latency_us": LATENCY_US})
        seq = 0
        coalesced = {"c0": 10_000, "c1": 10_000}   # sequence numbers of their own, apart from the plain ones
        b.iteration(0)
        for n, x in enumerate(plan):
            gap = rng.uniform(0.0, 30.0)
            s = rng.randint(0, 2)
            if x < 0.45:
                b.kernel(stream=s, duration_us=rng.uniform(1.0, 80.0), gap_us=gap)
            elif x < 0.55:
                b.record(event=rng.randint(1, 3), stream=s, gap_us=gap)
            elif x < 0.65:
                b.wait(stream=s, event=rng.randint(1, 3), gap_us=gap)
            elif x < 0.70:
                b.event_sync(event=rng.randint(1, 3), gap_us=gap)
            elif x < 0.74:
                b.stream_sync(stream=s, gap_us=gap)
            elif x < 0.76:
                b.device_sync(gap_us=gap)
            elif x < 0.80:
                b.memcpy(4096, direction="d2h", stream=s, blocking=True, duration_us=rng.uniform(1, 20), gap_us=gap)
            elif x < 0.86:
                b.collective(stream=2 + (seq % 2), comm=f"c{seq % 2}", comm_seq=seq // 2,
                             duration_us=rng.uniform(5.0, 60.0), gap_us=gap)
                seq += 1
            elif x < 0.88:  # coalesced collectives: one group, on one communicator or both
                shape = random.Random(seed * 1000 + n).choice([("c0", "c0"), ("c0", "c1"), ("c1", "c0", "c1")])
                for comm in shape:   # the same calls on every rank; gaps and durations differ
                    ev = b.collective(stream=2, comm=comm, comm_seq=coalesced[comm],
                                      duration_us=rng.uniform(5.0, 60.0), gap_us=rng.uniform(0.0, 5.0))
                    coalesced[comm] += 1
                    ev["group"] = n
                    if rng.random() < 0.3:
                        b.record(event=rng.randint(1, 3), stream=2, gap_us=rng.uniform(0.0, 5.0))
            elif x < 0.90:  # a ring exchange (batch_isend_irecv): send and recv in one group, in either order
                ops = [("send", (rank + 1) % ranks), ("recv", (rank - 1) % ranks)]
                rng.shuffle(ops)
                for op, peer in ops:
                    ev = b.collective(op=op, stream=3, comm="ring", peer=peer, duration_us=rng.uniform(5.0, 60.0),
                                      gap_us=rng.uniform(0.0, 5.0))
                    ev["ranks"], ev["group"] = ranks, n
                    if rng.random() < 0.3:
                        b.wait(stream=3, event=rng.randint(1, 3), gap_us=rng.uniform(0.0, 5.0))
            else:
                b.iteration(n + 1, gap_us=gap)
            if x < 0.45 and rng.random() < 0.2:
                b.events[-1]["stall_us"] = rng.uniform(0.0, 10.0)
        b.device_sync()
        b.iteration(len(plan) + 2, end=True)
        docs.append(b.doc())
    return docs


@pytest.mark.parametrize("seed", range(25))
@pytest.mark.parametrize("ranks", [1, 3])
@pytest.mark.parametrize("depth", [4, 1024])
def test_engine_matches_the_reference_simulator(seed, ranks, depth):
    programs = [build_program(d) for d in random_traces(seed, ranks)]
    durations = assign_durations(programs, lookup("h100-sxm"), "measured", None, 8)
    group_of, groups = collate(programs, durations)
    setups = host_plan(programs, host_speed=1.0, latency_us=[LATENCY_US] * ranks, costs_us={}).setups
    timelines = run(programs, durations, group_of, groups, setups, queue_depth=depth)
    for grp in groups:  # run() consumed the arrival counters; the reference counts afresh
        grp.arrived, grp.last_arrival = 0, 0.0
    ref = ReferenceDES(programs, durations, group_of, groups, depth, [s.align_at for s in setups])
    ref.run()
    for r, (prog, tl) in enumerate(zip(programs, timelines)):
        dev = prog.device_index
        np.testing.assert_allclose(tl.end[dev], ref.end[r][dev], atol=1e-6)
        np.testing.assert_allclose(tl.start[dev], ref.start[r][dev], atol=1e-6)
        marks = np.flatnonzero(prog.kind_array == ITERATION)
        np.testing.assert_allclose(tl.host_of(marks), ref.host[r][marks], atol=1e-6)
        np.testing.assert_allclose(tl.host[dev], ref.host[r][dev], atol=1e-6)
