"""How much host time the real CUDA runtime (libcudart) spends per call on the emulated driver: the part of the
calibrated runtime-call costs (emulate/host_call_costs.json) that driver-backend gaps already hold.

On the shim, the runtime is the shim itself and answers at once, so the simulator adds the whole calibrated cost of
each call (launch 7.5 us, ...: what the runtime *and* the driver spent in real profiles). On the driver backend the
real libcudart runs, and its CPU time would land in the captured gaps as well, unless the gaps end at the
runtime's entry (emulate/csrc/runtime_marks.c does this for calls through torch's libcudart). This
benchmark measures the runtime's share on this machine: the same torch loop (one call of a kind per iteration)
in a child on each backend, thread CPU time per iteration, the driver's minus the shim's (torch's own work is the
same on both). Nothing is logged in either child, but the fake driver still reads the thread CPU clock twice per
timed call (capture.c; about 0.35 us a read here), which captured gaps do not hold: the figures are upper bounds
of what the gaps hold twice.

    python -m emulate.driver.runtime_cost [--hardware h100-sxm] [--calls 20000] [--repeats 3]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap

from profiling.hardware import lookup

KINDS = ("kernel", "event_record", "stream_wait_event", "memcpy")

LOOP = textwrap.dedent("""
    import sys, time, torch
    kind, calls = sys.argv[1], int(sys.argv[2])
    x = torch.zeros(256, device="cuda")
    host = torch.zeros(256).pin_memory()
    event, side = torch.cuda.Event(), torch.cuda.Stream()
    event.record()
    step = {"kernel": lambda: x.add_(1), "event_record": event.record,
            "stream_wait_event": lambda: side.wait_event(event),
            "memcpy": lambda: x.copy_(host, non_blocking=True)}[kind]
    for _ in range(1000):
        step()
    start = time.thread_time_ns()
    for _ in range(calls):
        step()
    print((time.thread_time_ns() - start) / calls)
""")


def child_environment(backend: str, hardware: str) -> dict[str, str]:
    """The environment a rank of ``backend`` gets, without a capture log."""
    from emulate.launcher import backend_environment, gpu_environment
    from emulate.shim_build import shim_path

    spec = lookup(hardware)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPCAST_")}
    env.update(gpu_environment(spec, 1))
    env.update(backend_environment(backend, shim_path(), spec, 1, env))
    return env


def per_call_ns(backend: str, kind: str, hardware: str, calls: int, repeats: int) -> float:
    """Smallest over ``repeats`` runs of the loop's thread CPU time per iteration (ns)."""
    env = child_environment(backend, hardware)
    best = float("inf")
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", LOOP, kind, str(calls)], env=env, capture_output=True,
                             text=True, timeout=600)
        if out.returncode != 0:
            raise RuntimeError(f"{backend} {kind}: {out.stderr.strip().splitlines()[-1:]}")
        best = min(best, float(out.stdout.split()[-1]))
    return best


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hardware", default="h100-sxm")
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--repeats", type=int, default=3)
    ns = p.parse_args(argv)
    print(f"{'call':<20}{'shim us':>10}{'driver us':>12}{'runtime us':>12}")
    for kind in KINDS:
        shim = per_call_ns("shim", kind, ns.hardware, ns.calls, ns.repeats) / 1e3
        driver = per_call_ns("driver", kind, ns.hardware, ns.calls, ns.repeats) / 1e3
        print(f"{kind:<20}{shim:>10.2f}{driver:>12.2f}{driver - shim:>12.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
