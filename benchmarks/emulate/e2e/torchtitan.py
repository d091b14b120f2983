"""torchtitan's published training runs (every row of the three files under ``torchtitan/benchmarks/``, read by
:mod:`benchmarks.emulate.e2e.titan_rows`), each run through torchtitan's own trainer on the emulator, with the releases
nearest the software that was measured (:mod:`benchmarks.emulate.e2e.titan_stack`: torchtitan 0.1.0 with torch 2.6.0 and
torchao 0.8.0 for the 2024 file, torch 2.8.0 and torchao 0.12.0 for the June 2025 files, in throwaway environments).

How a row runs: ``examples/torchtitan_v010_train.py`` (torchtitan 0.1.0's ``torchtitan.train`` on a stand-in
tokenizer and corpus) with the row's recipe as torchtitan's command-line flags: model flavor, parallel degrees,
pipeline schedule, local batch, sequence length, activation checkpointing, ``--training.compile``, Float8 and async
TP. The same rules for every row, none per row:

- torchtitan of the published dates split a pipeline rank's local batch into as many microbatches as pipeline
  stages, counting the virtual ones (a looped schedule such as Interleaved 1F1B built two stages per rank), where
  0.1.0 defaults to microbatches of one sample: ``--parallelism.pipeline_parallel_microbatch_size`` is local batch
  / (PP degree x :func:`stages_per_rank`);
- selective checkpointing is the configs' per-op policy (``--activation_checkpoint.selective_ac_option op``, the
  llama3 tomls' setting; 0.1.0's default is every second block);
- Float8 converts every Linear but the output projection (``--float8.filter_fqns output``: the 2024 converter's
  fixed filter, the June 2025 tomls' setting), tensorwise unless the row says rowwise, with the Float8 options the
  published command states;
- checkpointing, TensorBoard and the profiler are off (torchtitan's defaults), and each run takes :data:`STEPS`
  steps (the first warms up; the report takes the median of the rest);
- the seed is given (``--training.seed``): unseeded, 0.1.0 agrees on one by reading rank 0's random CPU generator
  state as a uint64, which torch 2.6 cannot convert to a Python int half the time (a crash before training, on a
  real machine as here).

Ranks: a run on one node (8 GPUs) starts every rank, and rank deduplication stops those whose device work matches a
lower rank's; a multi-node run is sparse (``--run-ranks``): data-, tensor- and context-parallel peers do the same
work, so one rank per pipeline stage runs (rank 0 alone without pipeline parallelism) and the others are copies.

Figures compared: tokens/s/GPU as torchtitan logs it (local batch x sequence / (step time x TP x CP x PP)) and peak
memory as it logs it (the caching allocator's ``max_memory_reserved``, the largest over the ranks that ran). Each
row also gives the report's step breakdown and rank 0's predicted device time per kernel class
(:mod:`benchmarks.emulate.e2e.kernel_classes`: cuBLAS bf16 / fp8 GEMMs, Inductor's GEMM templates and fused kernels,
attention, collectives by kind ...) in one steady iteration, the emulation's wall time and the peak summed
resident memory of its processes.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.emulate.e2e import titan_stack
from benchmarks.emulate.e2e.cache import cached
from benchmarks.emulate.e2e.kernel_classes import kernel_class
from benchmarks.emulate.e2e.titan_rows import GPUS_PER_NODE, PublishedRow, Recipe
from stepcast.emulate.emulation import emulate_script
from stepcast.profiling.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "examples" / "torchtitan_v010_train.py"
STEPS = 3            # the first is warm-up; deduplicated ranks stop after the second and third agree
TIMEOUT_S = 6 * 3600.0
FILE_OFF = ("--checkpoint.no-enable-checkpoint", "--metrics.no-enable-tensorboard",
            "--profiling.no-enable-profiling")
SEED = ("--training.seed", "0")   # module docstring

# names the search benchmark reads (the 2024 file's Table 1 and its default sequence)
BENCHMARK = Path("torchtitan/benchmarks/llama3_h100_202412_torchtitan.md")
SEQ = 8192


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


def bool_flag(name: str, on: bool) -> str:
    """torchtitan 0.1.0's (tyro's) spelling of a boolean option: ``--section.name`` or ``--section.no-name``."""
    section, option = name.split(".")
    option = option.replace("_", "-")
    return f"--{section}.{option}" if on else f"--{section}.no-{option}"


def float8_args(recipe: Recipe) -> list[str]:
    """The Float8 flags of a recipe (module docstring); none for bf16."""
    if recipe.float8 is None:
        return []
    args = ["--model.converters", "float8", "--float8.filter_fqns", "output"]
    if recipe.float8 != "tensorwise":   # 0.1.0's converter is tensorwise when no recipe is named
        args += ["--float8.recipe_name", recipe.float8]
    return args + [bool_flag(f"float8.{option}", True) for option in recipe.float8_options]


def stages_per_rank(schedule: str) -> int:
    """Pipeline stages a rank holds under torchtitan's default split (of December 2024 and 0.1.0 alike): one for a
    single-stage schedule, two for a looped (multi-stage) one, by torch's own classification of the schedule."""
    from torch.distributed.pipelining.schedules import PipelineScheduleMulti, get_schedule_class
    return 2 if issubclass(get_schedule_class(schedule), PipelineScheduleMulti) else 1


def trainer_args(recipe: Recipe, steps: int = STEPS, spec: str = "llama3") -> list[str]:
    """torchtitan 0.1.0's command line for the recipe, running train spec ``spec`` (the launcher adds the stand-in
    assets)."""
    custom = [] if spec == "llama3" else ["--experimental.custom_import", titan_stack.SPECS_MODULE]
    args = [*custom, "--model.name", spec, "--model.flavor", recipe.flavor,
            "--training.steps", str(steps), "--training.local_batch_size", str(recipe.local_batch),
            "--training.seq_len", str(recipe.seq),
            "--parallelism.data_parallel_shard_degree", str(recipe.dp_shard),
            "--parallelism.tensor_parallel_degree", str(recipe.tp),
            "--parallelism.context_parallel_degree", str(recipe.cp),
            "--parallelism.pipeline_parallel_degree", str(recipe.pp)]
    if recipe.pp > 1:
        args += ["--parallelism.pipeline_parallel_schedule", str(recipe.pp_schedule),
                 "--parallelism.pipeline_parallel_microbatch_size",
                 str(recipe.local_batch // (recipe.pp * stages_per_rank(str(recipe.pp_schedule))))]
    args += ["--activation_checkpoint.mode", recipe.ac]
    if recipe.ac == "selective":
        args += ["--activation_checkpoint.selective_ac_option", "op"]
    args += [bool_flag("training.compile", recipe.compile),
             bool_flag("parallelism.enable_async_tensor_parallel", recipe.async_tp), *float8_args(recipe), *FILE_OFF,
             *SEED]
    return args


def run_ranks(recipe: Recipe) -> list[int] | None:
    """The ranks a multi-node run starts (None: one node, every rank, deduplicated): rank 0 of every pipeline
    stage, in torchtitan's mesh order (pp, dp, cp, tp from outermost)."""
    if recipe.gpus <= GPUS_PER_NODE:
        return None
    per_stage = recipe.gpus // recipe.pp
    return [stage * per_stage for stage in range(recipe.pp)]


def run_options(recipe: Recipe) -> list[str]:
    """``stepcast run`` options besides hardware, nproc, report and traces."""
    ranks = run_ranks(recipe)
    nodes = ["--nodes", str(recipe.nodes)] if recipe.nodes > 1 else []
    return [*nodes, *(["--run-ranks", ",".join(map(str, ranks))] if ranks else [])]


def row_args(row: PublishedRow) -> list[str]:
    """The trainer's command line for a published row: its recipe, with its file's train spec."""
    return trainer_args(row.recipe, spec=titan_stack.train_spec(row.source))


def row_key(row: PublishedRow) -> str:
    """The cache key: the recipe's, and the exact command and software stack, so any change runs the row again."""
    command = json.dumps([row_args(row), run_options(row.recipe), titan_stack.stack_of(row.source).describe()])
    return f"{row.key()}-{hashlib.sha256(command.encode()).hexdigest()[:8]}"


def emulate_row(row: PublishedRow, trace_dir: Path | None = None) -> dict[str, Any]:
    """Run one recipe on the emulator: {ok, iteration_ms, memory, breakdown, families, wall_s, peak_rss_bytes}
    or {ok: False, error, ...}. ``trace_dir``: where the captured traces stay (default: a temporary folder)."""
    from benchmarks.emulate.scale import MemorySampler, measured_runner
    from benchmarks.emulate.torch_venv import VenvError

    recipe = row.recipe
    sampler = MemorySampler()
    stack = titan_stack.stack_of(row.source)
    refused = stack.unsupported(recipe.float8)
    if refused:
        return {"ok": False, "error": refused, "command": None, "wall_s": 0.0, "peak_rss_bytes": 0}
    try:
        python = str(stack.python())
    except VenvError as exc:
        return {"ok": False, "error": str(exc), "command": None, "wall_s": 0.0, "peak_rss_bytes": 0}
    result = emulate_script(SCRIPT, row_args(row), recipe.hardware, python=python,
                            nproc=min(recipe.gpus, GPUS_PER_NODE), timeout_s=TIMEOUT_S, trace_dir=trace_dir,
                            options=run_options(recipe), runner=measured_runner(sampler), classify=kernel_class)
    out: dict[str, Any] = {"ok": result["ok"], "wall_s": round(result["wall_s"], 1),
                           "peak_rss_bytes": sampler.peak_bytes}
    if not result["ok"]:
        out.update(error=result["error"], command=result["command"])
        return out
    report = result["report"]
    reserved = [r["max_memory_reserved"] for r in report.get("ranks", []) if r.get("max_memory_reserved")]
    steady = report.get("steady_iterations") or []
    out.update(iteration_ms=report["iteration_time_ms"], iterations_ms=report["iterations_ms"],
               peak_memory_bytes=report["peak_memory_bytes"], max_memory_reserved=max(reserved, default=None),
               memory_by_rank={r["rank"]: {"reserved": r.get("max_memory_reserved"),
                                           "allocated": r.get("max_memory_allocated")}
                               for r in report.get("ranks", [])},
               breakdown_ms=report["breakdown_ms"], mfu=report["mfu"], warnings=report.get("warnings", []),
               fallback_kernels_steady=report.get("fallback_kernels_steady"),
               families_ms=result["iterations"][steady[-1]] if steady else None)
    return out


def run_row(row: PublishedRow, fresh: bool = False, keep_traces: Path | None = None) -> dict[str, Any]:
    """Emulate one published row (cached per commit and :func:`row_key`) and compare it with the publication.
    ``keep_traces``: emulate it again whatever the cache holds and keep its traces under ``keep_traces/<key>``."""
    key = row_key(row)
    traces = keep_traces / key if keep_traces is not None else None
    out = dict(cached(key, lambda: emulate_row(row, traces), fresh or traces is not None))
    out.update(name=row.name, table=row.table, source=row.source, hardware=row.recipe.hardware, notes=list(row.notes),
               recipe=asdict(row.recipe), published={"tps_per_gpu": row.tps_per_gpu,
                                                          "memory_gib": row.memory_gib, "step_ms": row.step_ms})
    if out["ok"]:
        out["tps_per_gpu"] = row.recipe.tokens_per_gpu_step / (out["iteration_ms"] / 1e3)
        out["tps_error"] = error_pct(out["tps_per_gpu"], row.tps_per_gpu)
        if out.get("max_memory_reserved"):
            out["memory_gib"] = out["max_memory_reserved"] / 2**30
            if row.memory_gib:
                out["memory_error"] = error_pct(out["memory_gib"], row.memory_gib)
    return out


def error_pct(predicted: float, published: float) -> float:
    return (predicted - published) / published * 100.0


def order_pairs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every pair of rows of one published table that both ran, with the published and predicted gain of the second
    over the first (TPS/GPU ratio) and whether the prediction orders them as the publication does: a table compares
    techniques (compile, Float8, async TP, a schedule, a layout) on one model, so the order within it is the choice
    a user makes. A published tie orders nothing."""
    pairs = []
    ran = [r for r in rows if r.get("ok")]
    for i, a in enumerate(ran):
        for b in ran[i + 1:]:
            if a.get("table", a["name"].split(": ")[0]) != b.get("table", b["name"].split(": ")[0]):
                continue
            pub_a, pub_b = a["published"]["tps_per_gpu"], b["published"]["tps_per_gpu"]
            pairs.append({"first": a["name"], "second": b["name"], "published_gain": pub_b / pub_a,
                          "predicted_gain": b["tps_per_gpu"] / a["tps_per_gpu"],
                          "agrees": pub_a == pub_b or (pub_b - pub_a) * (b["tps_per_gpu"] - a["tps_per_gpu"]) > 0})
    return pairs


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Over all rows: how many ran and failed, mean and worst |TPS error| and Spearman's rank correlation of
    predicted against published TPS/GPU over the rows that ran (None below three), the same for memory, and how
    many of the pairs within a table the prediction orders as published (:func:`order_pairs`)."""
    import pandas as pd

    ok = [r for r in rows if r.get("ok")]
    out: dict[str, Any] = {"rows": len(rows), "ran": len(ok), "failed": len(rows) - len(ok),
                           "mean_abs_tps_error": None, "worst_abs_tps_error": None, "spearman": None,
                           "mean_abs_memory_error": None, "worst_abs_memory_error": None}
    pairs = order_pairs(rows)
    out.update(pairs=len(pairs), pairs_in_order=sum(p["agrees"] for p in pairs),
               wrong_order=[p for p in pairs if not p["agrees"]])
    if ok:
        errors = [abs(r["tps_error"]) for r in ok]
        out["mean_abs_tps_error"] = sum(errors) / len(errors)
        out["worst_abs_tps_error"] = max(errors)
    if len(ok) >= 3:
        frame = pd.DataFrame({"predicted": [r["tps_per_gpu"] for r in ok],
                              "published": [r["published"]["tps_per_gpu"] for r in ok]})
        rho = frame.corr(method="spearman").loc["predicted", "published"]
        out["spearman"] = None if math.isnan(rho) else float(rho)
    mem = [abs(r["memory_error"]) for r in ok if r.get("memory_error") is not None]
    if mem:
        out["mean_abs_memory_error"] = sum(mem) / len(mem)
        out["worst_abs_memory_error"] = max(mem)
    return out


def print_table(rows: list[dict[str, Any]], console) -> dict[str, Any]:
    """The row table, the breakdown table and the summary (returned)."""
    from rich.table import Table

    table = Table(title="torchtitan's published runs vs emulation (aims: TPS/GPU mean |error| 5 %, worst 10 %; "
                        "memory 5 %; " + titan_stack.describe() + ")")
    for column in ("row", "board", "TPS/GPU pub", "pred", "err", "GiB pub", "pred", "err", "step ms pub", "pred",
                   "emul s", "RSS GiB"):
        table.add_column(column, justify="left" if column in ("row", "board") else "right")
    for r in rows:
        pub = r["published"]
        mem_pub = "" if pub["memory_gib"] is None else f"{pub['memory_gib']:.1f}"
        rss = f"{r['peak_rss_bytes'] / 2**30:.1f}" if r.get("peak_rss_bytes") else ""
        if not r["ok"]:
            table.add_row(r["name"], r["hardware"], f"{pub['tps_per_gpu']:,.0f}", "failed", "", mem_pub, "", "",
                          f"{pub['step_ms']:,.0f}", "", f"{r['wall_s']:.0f}", rss)
            continue
        mem = r.get("memory_gib")
        table.add_row(r["name"], r["hardware"], f"{pub['tps_per_gpu']:,.0f}", f"{r['tps_per_gpu']:,.0f}",
                      f"{r['tps_error']:+.1f}%", mem_pub, "" if mem is None else f"{mem:.1f}",
                      f"{r['memory_error']:+.1f}%" if r.get("memory_error") is not None else "",
                      f"{pub['step_ms']:,.0f}", f"{r['iteration_ms']:,.0f}", f"{r['wall_s']:.0f}", rss)
    console.print(table)
    for r in rows:
        if not r["ok"]:
            console.print(f"failed: {r['name']}: {r['error']}", highlight=False)
        for note in r.get("notes", []):
            console.print(f"note: {r['name']}: {note}", highlight=False)

    breakdown = Table(title="Where the predicted step goes: the report's breakdown (ms) and rank 0's device time by "
                            "kernel class in one steady iteration (ms, the largest six)")
    parts = ("compute", "exposed_communication", "host_bound", "idle")
    for column in ("row", *(p.replace("_", " ") for p in parts), "communication", "top kernel classes"):
        breakdown.add_column(column, justify="left" if column in ("row", "top kernel classes") else "right")
    for r in rows:
        if not r.get("ok"):
            continue
        fam = sorted((r.get("families_ms") or {}).items(), key=lambda kv: -kv[1])[:6]
        breakdown.add_row(r["name"], *(f"{r['breakdown_ms'].get(p, 0.0):,.0f}" for p in parts),
                          f"{r['breakdown_ms'].get('communication', 0.0):,.0f}",
                          ", ".join(f"{f} {ms:,.0f}" for f, ms in fam))
    console.print(breakdown)
    console.print("idle: a collective (a pipeline send/recv included) waits for its peers: the pipeline bubble and "
                  "load imbalance; communication: collectives' total time, exposed or not", highlight=False)
    stats = summary(rows)
    console.print(summary_line(stats), highlight=False)
    for pair in stats["wrong_order"]:
        console.print(wrong_order_line(pair), highlight=False)
    return stats


def summary_line(stats: dict[str, Any]) -> str:
    """The summary over rows in one sentence, as the console and the page print it."""
    pct = lambda v: "n/a" if v is None else f"{v:.1f} %"  # noqa: E731
    rho = "n/a" if stats["spearman"] is None else format(stats["spearman"], ".3f")
    return (f"Rows {stats['rows']}: {stats['ran']} ran, {stats['failed']} failed. TPS/GPU |error| mean "
            f"{pct(stats['mean_abs_tps_error'])}, worst {pct(stats['worst_abs_tps_error'])}; Spearman {rho} over "
            f"the rows that ran; pairs within a table ordered as published: {stats['pairs_in_order']} of "
            f"{stats['pairs']}; memory |error| mean {pct(stats['mean_abs_memory_error'])}, worst "
            f"{pct(stats['worst_abs_memory_error'])}.")


def wrong_order_line(pair: dict[str, Any]) -> str:
    """A pair of rows the prediction orders against the publication, with both gains."""
    return (f"wrong order: {pair['second']} over {pair['first']}: published x{pair['published_gain']:.3f}, "
            f"predicted x{pair['predicted_gain']:.3f}")


def page(rows: list[dict[str, Any]], commit: str, command: str) -> str:
    """The docs page of a run of the rows: every row's TPS/GPU and memory against the published figures, where its
    step goes, and the summary, naming the commit and the command that produced them."""
    stats = summary(rows)
    lines = ["# torchtitan's published runs, emulated", "",
             f"Generated by `{command}`, the rows computed at commit {commit[:10]}: the published rows of the three "
             "benchmark files under the shared data's `torchtitan/benchmarks/` that the command selected (all 32 "
             "without `--rows`), each run through torchtitan's trainer on the emulator with "
             f"{titan_stack.describe()} (`benchmarks/emulate/e2e/titan_stack.py` says why these releases). "
             "Aims (issue 34): "
             "TPS/GPU mean |error| 5 %, worst 10 %; memory within 5 % on every row; Spearman 0.95; every pair within "
             "a table in the published order.", "",
             summary_line(stats), "",
             *(f"- {wrong_order_line(pair)}" for pair in stats["wrong_order"]),
             *([""] if stats["wrong_order"] else []),
             "| row | board | TPS/GPU published | predicted | error | GiB published | predicted | error | "
             "step ms predicted | compute | exposed comm. | idle | largest kernel classes (ms) | emulation s | "
             "RSS GiB |",
             "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|--:|"]
    for r in rows:
        pub = r["published"]
        mem_pub = "" if pub["memory_gib"] is None else f"{pub['memory_gib']:.1f}"
        rss = f"{r['peak_rss_bytes'] / 2**30:.1f}" if r.get("peak_rss_bytes") else ""
        if not r["ok"]:
            lines.append(f"| {r['name']} | {r['hardware']} | {pub['tps_per_gpu']:,.0f} | failed: "
                         f"{str(r.get('error', '')).replace('|', '/')[:120]} | | {mem_pub} | | | | | | | | "
                         f"{r['wall_s']:.0f} | {rss} |")
            continue
        b = r["breakdown_ms"]
        fam = sorted((r.get("families_ms") or {}).items(), key=lambda kv: -kv[1])[:4]
        mem = r.get("memory_gib")
        lines.append(f"| {r['name']} | {r['hardware']} | {pub['tps_per_gpu']:,.0f} | {r['tps_per_gpu']:,.0f} | "
                     f"{r['tps_error']:+.1f} % | {mem_pub} | {'' if mem is None else f'{mem:.1f}'} | "
                     f"{'' if r.get('memory_error') is None else format(r['memory_error'], '+.1f') + ' %'} | "
                     f"{r['iteration_ms']:,.0f} | {b.get('compute', 0.0):,.0f} | "
                     f"{b.get('exposed_communication', 0.0):,.0f} | {b.get('idle', 0.0):,.0f} | "
                     f"{', '.join(f'{f} {ms:,.0f}' for f, ms in fam)} | {r['wall_s']:.0f} | {rss} |")
    lines += ["", "TPS/GPU as torchtitan logs it; memory is the caching allocator's peak reserved GiB (the largest "
              "over the ranks that ran). Idle: a collective waiting for its peers (pipeline bubble, imbalance)."]
    return "\n".join(lines) + "\n"
