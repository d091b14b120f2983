"""torchtitan's published H100 training runs (``torchtitan/benchmarks/llama3_h100_202412_torchtitan.md``), reproduced
by ``examples/llama_fsdp2.py`` and emulated with one process per GPU (rank deduplication stops the ranks whose work
matches rank 0's after the first full step).

Rows reproduced: Table 1's plain ``FSDP`` row (Llama 3.1 8B, 8 GPUs, local batch 2, selective "op" activation
checkpointing, no torch.compile, no Float8). The table does not state the sequence length; it is torchtitan's
``llama3_8b.toml`` default, 8192. Published figures: TPS/GPU (tokens per second per GPU, read at step 90) and peak
memory in GiB (torchtitan logs the CUDA caching allocator's peak reserved memory, ``torch.cuda.max_memory_reserved``,
which the emulation report records per rank under ``ranks``; the report's ``peak_memory_bytes`` is shown beside
it). Step time = local batch x sequence / TPS.

Target: the runs used H100 SXM boards with 96 GB HBM2e (2.4 TB/s) at a 500 W power limit, the catalog's
``h100-sxm-96gb-500w`` (``HARDWARE``; its clock and peaks are derived from the power limit at load, see
``profiling/hardware.py``). The row also reports rank 0's predicted device time per kernel family in one steady
iteration, the breakdown that says where the step goes.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emulate.e2e.emulation import cached, emulate_script
from profiling.paths import REPO_ROOT

BENCHMARK = Path("torchtitan/benchmarks/llama3_h100_202412_torchtitan.md")
SCRIPT = REPO_ROOT / "examples" / "llama_fsdp2.py"
HARDWARE = "h100-sxm-96gb-500w"
SEQ = 8192          # torchtitan's llama3_8b.toml default (the table does not restate it)
STEPS = 3           # the first is warm-up, the report wants two more; deduplicated ranks stop after the second
TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class Published:
    """One published row and the configuration it ran."""

    name: str
    table: int
    technique: str
    gpus: int
    local_batch: int
    seq: int
    tps_per_gpu: float
    memory_gib: float
    script_args: tuple[str, ...]

    @property
    def step_ms(self) -> float:
        return self.local_batch * self.seq / self.tps_per_gpu * 1e3


def parse_tables(text: str) -> dict[int, tuple[str, list[dict[str, str]]]]:
    """Markdown tables under ``**Table N** caption`` lines: {N: (caption, rows as {column: cell})}."""
    tables: dict[int, tuple[str, list[dict[str, str]]]] = {}
    current: int | None = None
    header: list[str] | None = None
    for line in text.splitlines():
        caption = re.match(r"\*\*Table (\d+)\*\*\s*(.*)", line.strip())
        if caption:
            current, header = int(caption[1]), None
            tables[current] = (caption[2], [])
            continue
        if current is None or not line.strip().startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif not all(set(c) <= set("-: ") for c in cells):
            tables[current][1].append(dict(zip(header, cells)))
    return tables


def number(cell: str) -> float:
    return float(cell.replace(",", ""))


def published_rows(root: Path) -> list[Published]:
    """The reproduced rows of the benchmark file under the shared data ``root`` (empty when it is absent)."""
    path = root / BENCHMARK
    if not path.is_file():
        return []
    tables = parse_tables(path.read_text())
    caption, rows = tables[1]
    gpus = int(re.search(r"(\d+) GPUs", caption)[1])
    batch = int(re.search(r"Local batch size (\d+)", caption)[1])
    if "Llama 3.1 8B" not in caption or "Selective activation checkpointing" not in caption:
        raise ValueError(f"{path}: Table 1 no longer describes Llama 3.1 8B with selective checkpointing")
    out = []
    for row in rows:
        if row["Techniques"] != "FSDP":  # torch.compile and Float8 are not emulated
            continue
        out.append(Published(name=f"Llama 3.1 8B FSDP {gpus} GPUs (Table 1)", table=1, technique="FSDP",
                             gpus=gpus, local_batch=batch, seq=SEQ, tps_per_gpu=number(row["TPS/GPU"]),
                             memory_gib=number(row["Memory(GiB)"]),
                             script_args=("--preset", "8b", "--batch", str(batch), "--seq", str(SEQ),
                                          "--steps", str(STEPS))))
    return out


def run_row(pub: Published, fresh: bool = False) -> dict[str, Any]:
    """Emulate one published row (cached) and compare tokens/s/GPU and peak memory."""
    def compute() -> dict[str, Any]:
        result = emulate_script(SCRIPT, list(pub.script_args), HARDWARE, nproc=pub.gpus, timeout_s=TIMEOUT_S)
        if not result["ok"]:
            return {"ok": False, "error": result["error"], "command": result["command"],
                    "wall_s": round(result["wall_s"], 1)}
        report = result["report"]
        reserved = [r["max_memory_reserved"] for r in report.get("ranks", []) if r.get("max_memory_reserved")]
        return {"ok": True, "iteration_ms": report["iteration_time_ms"], "iterations_ms": report["iterations_ms"],
                "peak_memory_bytes": report["peak_memory_bytes"], "max_memory_reserved": max(reserved, default=None),
                "failed_mallocs": sum(r.get("failed_mallocs", 0) for r in report.get("ranks", [])[:1]),
                "breakdown_ms": report["breakdown_ms"], "mfu": report["mfu"], "wall_s": round(result["wall_s"], 1),
                "families_ms": result["iterations"][report["steady_iterations"][-1]]
                if report.get("steady_iterations") else None}

    row = cached(f"torchtitan-{pub.technique}-{pub.gpus}-{pub.local_batch}-{pub.seq}-{HARDWARE}", compute, fresh)
    row.update(name=pub.name, hardware=HARDWARE, published={"tps_per_gpu": pub.tps_per_gpu,
                                                           "memory_gib": pub.memory_gib, "step_ms": pub.step_ms})
    if row["ok"]:
        row["tps_per_gpu"] = pub.local_batch * pub.seq / (row["iteration_ms"] / 1e3)
        row["tps_error"] = (row["tps_per_gpu"] - pub.tps_per_gpu) / pub.tps_per_gpu * 100.0
        if row.get("max_memory_reserved"):
            row["memory_gib"] = row["max_memory_reserved"] / 2**30
            row["memory_error"] = (row["memory_gib"] - pub.memory_gib) / pub.memory_gib * 100.0
    return row


def print_table(rows: list[dict[str, Any]], console) -> None:
    from rich.table import Table

    table = Table(title=f"torchtitan published H100 runs vs emulation on {HARDWARE} (aim: TPS within 15 %, "
                        "memory within 5 %)")
    for column in ("run", "TPS/GPU pub", "TPS/GPU pred", "err", "step ms pub", "step ms pred", "GiB pub",
                   "GiB pred", "err", "report peak GiB", "OOM retries", "s"):
        table.add_column(column, justify="left" if column == "run" else "right")
    for r in rows:
        pub = r["published"]
        if not r["ok"]:
            table.add_row(r["name"], f"{pub['tps_per_gpu']:,.0f}", "failed", r["error"][:60],
                          f"{pub['step_ms']:.0f}", "", f"{pub['memory_gib']:.1f}", "", "", "", "", f"{r['wall_s']:.0f}")
            continue
        mem = r.get("memory_gib")
        table.add_row(r["name"], f"{pub['tps_per_gpu']:,.0f}", f"{r['tps_per_gpu']:,.0f}", f"{r['tps_error']:+.1f}%",
                      f"{pub['step_ms']:.0f}", f"{r['iteration_ms']:.0f}", f"{pub['memory_gib']:.1f}",
                      "n/a" if mem is None else f"{mem:.1f}",
                      "" if mem is None else f"{r['memory_error']:+.1f}%",
                      "n/a" if r["peak_memory_bytes"] is None else f"{r['peak_memory_bytes'] / 2**30:.1f}",
                      str(r.get("failed_mallocs", "")), f"{r['wall_s']:.0f}")
    console.print(table)
    console.print("GiB pred: the largest torch.cuda.max_memory_reserved over ranks (torchtitan's figure); OOM "
                  f"retries: device allocations the target refused (the caching allocator then frees its cache and "
                  f"retries); {HARDWARE}: the published 96 GB HBM2e boards at their 500 W limit")
    breakdown = Table(title="Where the predicted step goes (ms): the report's breakdown, and rank 0's device time "
                            "per kernel family in one steady iteration")
    families = sorted({f for r in rows if r.get("ok") and r.get("families_ms") for f in r["families_ms"]})
    parts = ("compute", "communication", "exposed_communication", "host_bound", "idle")
    for column in ("run", *parts, *families):
        breakdown.add_column(column.replace("_", " "), justify="left" if column == "run" else "right")
    for r in rows:
        if r.get("ok"):
            fam = r.get("families_ms") or {}
            breakdown.add_row(r["name"], *(f"{r['breakdown_ms'].get(p, 0.0):.0f}" for p in parts),
                              *(f"{fam.get(f, 0.0):.0f}" for f in families))
    console.print(breakdown)
