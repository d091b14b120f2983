"""Capture overhead: wall time of GPT training steps under full capture (the emulated driver's log + the op-context
hook) versus the same steps on the same emulated driver with nothing recorded (the host-side cost of the step
itself: torch's Python/C++ work and its real CUDA libraries, with every device call answered at once). Model
construction is excluded from both.

    python -m benchmarks.emulate.capture_overhead [--preset 1.3b] [--steps 2] [--hardware h100-sxm]

Prints a table; the issue's target is capture <= 2x host-side time. Keep the machine quiet while it runs.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from stepcast.emulate.driver.build import driver_path
from stepcast.emulate.driver.device import driver_environment
from stepcast.profiling.hardware import lookup
from stepcast.profiling.paths import REPO_ROOT

# Runs inside the emulated process: build the model (untimed), one warm-up step, then time `steps` steps.
DRIVER = """
import json, sys, time, torch, torch.nn.functional as F
sys.path.insert(0, {examples!r})
from gpt import GPT, parse_args
args = parse_args({gpt_args!r})
with torch.device("cuda"):
    model = GPT(args.vocab, args.seq, args.d_model, args.heads, args.layers, args.tie_embeddings)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
def step():
    tokens = torch.randint(args.vocab, (args.batch, args.seq + 1), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, args.vocab), tokens[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()
step()
times = []
for _ in range({steps}):
    t0 = time.perf_counter(); step(); times.append(time.perf_counter() - t0)
print("BENCH " + json.dumps({{"params": sum(p.numel() for p in model.parameters()), "step_s": times}}))
"""


def _bench_line(stdout: str) -> dict:
    line = next((ln for ln in stdout.splitlines() if ln.startswith("BENCH ")), None)
    if line is None:
        raise RuntimeError("the benchmark driver printed no result:\n" + stdout[-2000:])
    return json.loads(line[6:])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="1.3b")
    p.add_argument("--steps", type=int, default=5, help="timed steps (the fastest counts) after one warm-up")
    p.add_argument("--hardware", default="h100-sxm")
    ns = p.parse_args()
    console = Console()
    with tempfile.TemporaryDirectory(prefix="stepcast-bench-") as tmp:
        bench = Path(tmp) / "bench_gpt.py"
        bench.write_text(DRIVER.format(examples=str(REPO_ROOT / "examples"), gpt_args=["--preset", ns.preset],
                                        steps=ns.steps))
        driver = driver_path()
        # host-side reference: the driver answers every call, nothing is logged, no op context
        env = dict(os.environ, **driver_environment(lookup(ns.hardware), 1),
                   LD_LIBRARY_PATH=os.pathsep.join(p for p in (str(driver.parent), os.environ.get("LD_LIBRARY_PATH"))
                                                   if p))
        for name in ("STEPCAST_LOG", "STEPCAST_DRIVER_LOG"):
            env.pop(name, None)
        console.print("host-side reference run ...")
        plain = subprocess.run([sys.executable, str(bench)], env=env, capture_output=True, text=True)
        if plain.returncode != 0:
            raise SystemExit(f"the host-side reference run failed:\n{plain.stderr[-3000:]}")
        host = _bench_line(plain.stdout)
        console.print("capture run ...")
        t0 = time.perf_counter()
        cap = subprocess.run([sys.executable, "-m", "stepcast.emulate", "run", "--hardware", ns.hardware,
                              "--capture-only",
                              "--report", f"{tmp}/report.json", "--trace-dir", f"{tmp}/traces", "--", str(bench)],
                             cwd=REPO_ROOT, capture_output=True, text=True)
        if cap.returncode != 0:
            raise SystemExit(f"the capture run failed:\n{cap.stderr[-3000:]}")
        total = time.perf_counter() - t0
        captured = _bench_line(cap.stdout)
        report = json.loads(Path(tmp, "report.json").read_text())
        trace_bytes = sum(Path(t).stat().st_size for t in report["traces"])
        log_bytes = sum(p.stat().st_size for p in Path(tmp, "traces").glob("rank*.log.driver.*.jsonl"))
    host_s, cap_s = min(host["step_s"]), min(captured["step_s"])
    table = Table(title=f"Capture overhead: GPT {ns.preset} ({host['params'] / 1e9:.2f}B parameters) on a virtual "
                        f"{ns.hardware}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("host-side step (emulated driver, nothing recorded)", f"{host_s * 1e3:.1f} ms")
    table.add_row("captured step (driver log + op context)", f"{cap_s * 1e3:.1f} ms")
    table.add_row("overhead ratio (target <= 2.0)", f"{cap_s / host_s:.2f}x")
    table.add_row("events in trace", str(report["ranks"][0]["events"]))
    table.add_row("kernels in trace", str(report["ranks"][0]["kernels"]))
    table.add_row("capture log size", f"{log_bytes / 2**20:.1f} MiB")
    table.add_row("trace file size", f"{trace_bytes / 2**20:.1f} MiB")
    table.add_row("whole emulate run (start-up, capture, collation)", f"{total:.1f} s")
    console.print(table)


if __name__ == "__main__":
    main()
