"""End-to-end benchmark against real whole-model measurements (``python -m benchmarks.emulate.e2e``).

Sources (``--sources``, default all):

- ``neusight``: NeuSight's end-to-end labels (BERT-large, GPT-2 large, GPT-3 XL / 2.7B, OPT-1.3B on P100, P4, T4,
  V100, A100 PCIe; fp32, TF32 off, forward or forward + backward, no optimizer step). Each label's model is built
  from its HuggingFace config by ``examples/hf_model.py`` and run as NeuSight ran it, on the labelled virtual GPU;
  predicted forward, backward and total are compared with the label, and the mean |error| of the total per GPU is
  printed. Further tables set the predicted kernel time per family beside NeuSight's per-operator trace (its
  ``.csv``, one layer scaled to the model), per label and summed per GPU, to show where the error comes from.
  Held-out protocol: on these GPUs the emulator scales predicted kernel times by the in-step calibration
  (:mod:`emulate.sim.instep`), fitted on those same per-operator traces; each label is emulated with the factors
  fitted WITHOUT its own model's traces (``STEPCAST_INSTEP_EXCLUDE=<model>``: leave-one-model-out, on every GPU,
  also where a GPU with too few models left pools the others' factors), and the output says which rows were left
  out. ``STEPCAST_INSTEP=off`` gives the estimators alone. ``--unseen [routed]``: each GPU wholly unseen, a bundle
  trained without any of its rows (the shipped rules, or the unseen protocol's routes) and the in-step factors of
  the other GPUs pooled (:mod:`benchmarks.emulate.e2e.unseen_bundles`).
  ``python -m benchmarks.emulate.e2e.diagnose <gpu>`` shows, without emulating, the estimator's predictions of each
  label's own operators and the factors each label gets.
- ``torchtitan``: every published row of torchtitan's three benchmark files (Llama 3.1 8B / 70B / 405B on 8-512
  H100s of the published kind, ``h100-sxm-96gb-500w``, and on H200 nodes; FSDP, TP, async TP, PP with 1F1B and
  interleaved 1F1B, CP; torch.compile; Float8), each through torchtitan's own trainer with the published degrees,
  batch, sequence and checkpointing, on the releases nearest the measured software (torchtitan 0.1.0, torch 2.6.0,
  torchao 0.8.0 in a throwaway environment: :mod:`benchmarks.emulate.e2e.titan_stack`;
  :mod:`benchmarks.emulate.e2e.torchtitan`; multi-node rows as sparse runs);
  tokens/s/GPU and peak memory against the published figures, where the predicted step goes (breakdown, device
  time per family), each emulation's wall time and peak resident memory, then mean and worst |error| and
  Spearman's rank correlation over the rows. ``--rows`` picks rows by name; ``--keep-traces DIR`` emulates them
  again and keeps each one's captured traces (``DIR/<row key>/``) for ``stepcast replay`` or a closer look.
- ``nosync``: the GPT-2 large training loop without synchronisation (``examples/hf_model.py --no-sync``): the
  predicted iteration must be at least the device time of an iteration (its kernels' predicted durations).

Every emulation goes through ``stepcast run`` and is cached per (row, git HEAD) under the cache folder, so
a re-run resumes; ``--fresh`` ignores the cache. ``--json`` writes every row for quoting.
"""
from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from rich.console import Console
from rich.table import Table

from benchmarks.emulate.e2e import (
    labelled,
    neusight,
    nosync,
    titan_rows,
    torchtitan,
    unseen_bundles,
)
from benchmarks.emulate.e2e.cache import cached, git_head
from stepcast.emulate import config
from stepcast.emulate.emulation import emulate_script
from stepcast.emulate.sim import instep
from stepcast.profiling.atomic import write_bytes_atomic, write_json_atomic
from stepcast.profiling.paths import shared_data_root

SOURCES = ("neusight", "torchtitan", "nosync")
#: the newest torch whose default wheels (CUDA 12.6) still carry sm_50-sm_70 code: NeuSight's P100, P4 and V100
OLDER_TORCH = "2.7.1"
QUICK_MODELS = ("bert_large",)


def error_pct(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured * 100.0 if measured else float("nan")


def fmt_err(value: float | None) -> str:
    return "" if value is None or value != value else f"{value:+.1f}%"


def select_labels(labels: list[neusight.Label], gpus: list[str] | None, models: list[str] | None,
                  quick: bool) -> list[neusight.Label]:
    """Labels on the chosen GPUs (catalog ids or a part of one: 'v100') and models; ``quick``: BERT-large only,
    the smallest batch per GPU and mode."""
    chosen = [lb for lb in labels
              if (not gpus or any(g.lower() in lb.hardware for g in gpus))
              and (not models or lb.model in models)]
    if quick:
        smallest: dict[tuple[str, str], neusight.Label] = {}
        for lb in chosen:
            if lb.model in QUICK_MODELS:
                key = (lb.hardware, lb.mode)
                if key not in smallest or lb.batch < smallest[key].batch:
                    smallest[key] = lb
        chosen = sorted(smallest.values(), key=lambda lb: (lb.hardware, lb.mode))
    return chosen


def neusight_row(label: neusight.Label, fresh: bool,
                 torch_for: Callable[[str], tuple[str | None, str]] | None = None, unseen: str | None = None
                 ) -> dict[str, Any]:
    """Emulate one label (cached) and compare it with the measurement. ``torch_for(hardware)``: the interpreter to
    emulate it with (None: this one) and the torch it holds (:func:`interpreters`; default: the installed torch).
    ``unseen``: with a bundle and an in-step calibration that never saw the label's GPU
    (:mod:`benchmarks.emulate.e2e.unseen_bundles`), "shipped" (the shipped bundle's rules) or "routed" (the unseen
    protocol's routes)."""
    python, torch_version = torch_for(label.hardware) if torch_for else (None, "installed")

    def compute() -> dict[str, Any]:
        env = {**os.environ, "STEPCAST_INSTEP_EXCLUDE": label.model}  # leave-one-model-out (module docstring)
        if unseen:
            env.update(unseen_bundles.unseen_env(label.hardware, label.model, routed=unseen == "routed"))
        result = emulate_script(labelled.SCRIPT, neusight.script_args(label, labelled.REPS), label.hardware, env=env,
                                python=python)
        row: dict[str, Any] = {"ok": result["ok"], "wall_s": round(result["wall_s"], 1), "torch": torch_version}
        if not result["ok"]:
            row.update(error=result["error"], command=result["command"])
            return row
        passes = labelled.read_passes(result, label.mode)
        row.update(passes)
        row["fallback_kernels"] = result["report"].get("fallback_kernels")
        row["estimator"] = result["report"].get("estimator")
        return row

    row = cached(label.key + ("" if config.INSTEP_CALIBRATION else "-instep-off") + (f"-torch{torch_version}"
                                                                                         if python else "")
                 + (f"-unseen{'-routed' if unseen == 'routed' else ''}" if unseen else ""), compute, fresh)
    row.update(label=label.path.stem, gpu=label.hardware, model=label.model, mode=label.mode, held_out=label.model,
               unseen_gpu=unseen,
               measured={"forward_ms": label.forward_ms, "backward_ms": label.backward_ms,
                         "total_ms": label.total_ms})
    if row["ok"]:
        for part in ("forward", "backward", "total"):
            row[f"{part}_error"] = error_pct(row[f"{part}_ms"], row["measured"][f"{part}_ms"])
        row["csv_families"] = neusight.csv_family_ms(label) if label.csv.is_file() else None
    return row


def interpreters(older_torch: str | None) -> Callable[[str], tuple[str | None, str]]:
    """Which torch emulates each GPU: the installed one where it carries code for the GPU; else ``older_torch``, a
    release whose CUDA 12 build still does (NeuSight's P100, P4 and V100: CUDA 13 wheels start at sm_75), in a
    throwaway environment of :mod:`benchmarks.emulate.torch_venv` (made on first use, 5-8 GB, reused); None: such GPUs
    are emulated with the installed torch, which refuses them in one line (the row then says so)."""
    from stepcast.emulate.launcher import runs_on, torch_arch_flags, torch_version
    from stepcast.profiling.hardware import lookup

    flags, installed = torch_arch_flags(), torch_version() or "installed"
    venv: list[Any] = []

    def choose(hardware: str) -> tuple[str | None, str]:
        if older_torch is None or runs_on(flags, tuple(lookup(hardware).compute_capability)):
            return None, installed
        if not venv:
            from benchmarks.emulate.torch_venv import Installer

            venv.append(Installer().ensure(older_torch))
        return str(venv[0].python), venv[0].torch or older_torch

    return choose


def run_rows(items: list, compute: Callable[[Any], dict[str, Any]], name: Callable[[Any], str],
             console: Console) -> list[dict[str, Any]]:
    """``compute`` each item, with a progress line per item."""
    rows = []
    for n, item in enumerate(items, 1):
        t0 = time.perf_counter()
        row = compute(item)
        state = "ok" if row.get("ok") else f"failed: {row.get('error', '')[:120]}"
        console.print(f"[{n}/{len(items)}] {name(item)}: {state} ({time.perf_counter() - t0:.1f} s)",
                      highlight=False)
        rows.append(row)
    return rows


def neusight_tables(rows: list[dict[str, Any]], console: Console) -> dict[str, dict[str, float]]:
    """The label table, the per-GPU means (returned) and the per-family table."""
    table = Table(title="NeuSight end-to-end labels: predicted vs measured (ms), fp32, TF32 off")
    for column in ("GPU", "label", "fwd meas", "fwd pred", "err", "bwd meas", "bwd pred", "err", "total meas",
                   "total pred", "err", "s"):
        table.add_column(column, justify="left" if column in ("GPU", "label") else "right")
    for r in rows:
        m = r["measured"]
        if not r["ok"]:
            table.add_row(r["gpu"], r["label"], f"{m['forward_ms']:.1f}", "failed", "", f"{m['backward_ms']:.1f}",
                          "", "", f"{m['total_ms']:.1f}", "", "", f"{r['wall_s']:.0f}")
            continue
        train = r["mode"] == "train"
        table.add_row(r["gpu"], r["label"], f"{m['forward_ms']:.1f}", f"{r['forward_ms']:.1f}",
                      fmt_err(r["forward_error"]), f"{m['backward_ms']:.1f}" if train else "",
                      f"{r['backward_ms']:.1f}" if train else "", fmt_err(r["backward_error"]) if train else "",
                      f"{m['total_ms']:.1f}", f"{r['total_ms']:.1f}", fmt_err(r["total_error"]), f"{r['wall_s']:.0f}")
    console.print(table)
    means: dict[str, dict[str, float]] = {}
    for gpu in sorted({r["gpu"] for r in rows}):
        ok = [r for r in rows if r["gpu"] == gpu and r["ok"]]
        entry = {"labels": len([r for r in rows if r["gpu"] == gpu]), "emulated": len(ok)}
        if ok:
            entry["mean_abs_total_error"] = statistics.fmean(abs(r["total_error"]) for r in ok)
        train = [r for r in ok if r["mode"] == "train"]
        if train:
            entry["mean_abs_train_total_error"] = statistics.fmean(abs(r["total_error"]) for r in train)
        means[gpu] = entry
    summary = Table(title="Mean |error| of the total per GPU (aim: at most 8 %)")
    for column in ("GPU", "labels", "emulated", "all labels", "training labels"):
        summary.add_column(column, justify="left" if column == "GPU" else "right")
    for gpu, e in means.items():
        summary.add_row(gpu, str(e["labels"]), str(e["emulated"]), fmt_abs(e.get("mean_abs_total_error")),
                        fmt_abs(e.get("mean_abs_train_total_error")))
    console.print(summary)

    families = Table(title="Where the error comes from: predicted kernel ms by family vs NeuSight's per-op trace "
                           "(one layer x layers; forward + backward)")
    for column in ("GPU", "label", *(f"{f} meas/pred" for f in neusight.FAMILIES), "trace host", "pred gaps"):
        families.add_column(column, justify="left" if column in ("GPU", "label") else "right")
    for r in rows:
        if not r["ok"] or not r.get("csv_families"):
            continue
        csv, pred = r["csv_families"], r["families"]
        cells = []
        for family in neusight.FAMILIES:
            meas = sum(csv[p].get(family, 0.0) for p in csv)
            got = sum(pred[p].get(family, 0.0) for p in pred)
            cells.append(f"{meas:.0f}/{got:.0f} {fmt_err(error_pct(got, meas)) if meas > 0.5 else ''}")
        kernel_ms = sum(sum(d.values()) for d in pred.values())
        host = sum(csv[p].get(neusight.HOST, 0.0) for p in csv)
        families.add_row(r["gpu"], r["label"], *cells, f"{host:.0f}", f"{r['total_ms'] - kernel_ms:.0f}")
    console.print(families)
    console.print("meas/pred: NeuSight's per-op times (each node timed on its own) summed (layer rows x layers) / "
                  "the emulator's predicted kernel time; trace host: NeuSight rows that launch no kernel (size, "
                  "view...); pred gaps: predicted pass time not covered by kernels (host gaps, launch waits)")
    family_table(rows, console)
    return means


def in_step_family_ms(row: dict[str, Any]) -> dict[str, float]:
    """One label's measured kernel ms per family inside its passes: each pass's per-op trace times scaled so that
    the kernel-launching nodes add up to the measured pass (the in-step rows' ``pass_scale``)."""
    csv, out = row["csv_families"], {}
    for phase, measured in (("forward", row["measured"]["forward_ms"]), ("backward", row["measured"]["backward_ms"])):
        kernels = {f: ms for f, ms in csv.get(phase, {}).items() if f != neusight.HOST}
        total = sum(kernels.values())
        for family, ms in kernels.items():
            out[family] = out.get(family, 0.0) + (ms * measured / total if total > 0 else 0.0)
    return out


def family_table(rows: list[dict[str, Any]], console: Console) -> None:
    """Per GPU and family, over its emulated labels: the per-op traces as timed (each node on its own), the same
    scaled to the measured passes (in step), and the emulator's predicted kernel time, with the error against the
    in-step time."""
    table = Table(title="Error by GPU and kernel family (sum over the GPU's labels, ms): per-op trace as timed / "
                        "in step / predicted, and predicted vs in step")
    table.add_column("GPU", justify="left")
    for family in neusight.FAMILIES:
        table.add_column(f"{family} trace/in-step/pred", justify="right")
        table.add_column("err", justify="right")
    for gpu in sorted({r["gpu"] for r in rows}):
        mine = [r for r in rows if r["gpu"] == gpu and r["ok"] and r.get("csv_families")]
        if not mine:
            continue
        cells = []
        for family in neusight.FAMILIES:
            trace = sum(sum(r["csv_families"][p].get(family, 0.0) for p in r["csv_families"]) for r in mine)
            in_step = sum(in_step_family_ms(r).get(family, 0.0) for r in mine)
            pred = sum(sum(r["families"][p].get(family, 0.0) for p in r["families"]) for r in mine)
            cells += [f"{trace:.0f}/{in_step:.0f}/{pred:.0f}", fmt_err(error_pct(pred, in_step)) if in_step > 0.5
                      else ""]
        table.add_row(gpu, *cells)
    console.print(table)


def held_out_protocol(rows: list[dict[str, Any]], root: Path) -> str:
    """What each label's prediction did not see: the in-step rows of its own model (leave-one-model-out)."""
    if not config.INSTEP_CALIBRATION:
        return "held out: nothing (STEPCAST_INSTEP=off: no in-step calibration, the estimators alone)"
    in_step = instep.in_step_rows(str(root))
    held = []
    for model in sorted({r["held_out"] for r in rows if r.get("held_out")}):
        mine = in_step[in_step["model"] == model] if len(in_step) else in_step
        held.append(f"{model} {len(mine)} rows ({mine['sample'].nunique() if len(mine) else 0} traces)")
    line = ("held out (leave-one-model-out): each label was emulated with the in-step calibration fitted without "
            "its own model's rows (STEPCAST_INSTEP_EXCLUDE=<model>), on its GPU and on those it pools from when "
            f"fewer than {instep.MIN_MODELS} models are left; rows left out per model: " + "; ".join(held))
    unseen = next((r["unseen_gpu"] for r in rows if r.get("unseen_gpu")), None)
    if unseen:
        routes = " with the unseen protocol's routes" if unseen == "routed" else ""
        line += (f"; each GPU wholly unseen (--unseen {unseen}): a bundle trained without any of its rows{routes}, "
                 "and the other GPUs' in-step factors pooled")
    return line


def fmt_abs(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}%"


def page_command(argv: list[str]) -> str:
    """The command a generated page names: as it was run, shell-quoted, less ``--root`` (where this machine keeps
    the shared data is a setting, not part of what reproduces the page)."""
    kept, skip = [], False
    for arg in argv:
        if skip or arg.startswith("--root="):
            skip = False
            continue
        if arg == "--root":
            skip = True
            continue
        kept.append(arg)
    return " ".join(["python -m benchmarks.emulate.e2e", *map(shlex.quote, kept)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.emulate.e2e", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sources", default=",".join(SOURCES), help=f"comma-separated, of {', '.join(SOURCES)}")
    parser.add_argument("--gpus", default=None, help="NeuSight GPUs: comma-separated catalog ids or parts ('v100,t4')")
    parser.add_argument("--models", default=None, help="NeuSight models: comma-separated config stems "
                        "(bert_large, gpt2_large, gpt3_xl, gpt3_27, opt_13)")
    parser.add_argument("--modes", default="inf,train", help="NeuSight label modes (default inf,train)")
    parser.add_argument("--quick", action="store_true", help="BERT-large labels only (smallest batch per GPU and "
                        "mode), the no-sync check, no torchtitan")
    parser.add_argument("--rows", default=None, help="torchtitan rows whose name contains any of these "
                        "(comma-separated, e.g. 'Table 1,H200'), or the one row of exactly this name (names hold "
                        "commas: 'async TP 8B 64 GPUs: vanilla TP, float8 rowwise'); default every row")
    parser.add_argument("--keep-traces", type=Path, default=None, metavar="DIR",
                        help="emulate the torchtitan rows chosen again (not from the cache) and keep each one's "
                             "captured traces under DIR/<row key>/ for `stepcast replay` or a closer look")
    parser.add_argument("--fresh", action="store_true", help="ignore cached results of this commit")
    parser.add_argument("--root", type=Path, default=None, help="shared data folder (default: the setting)")
    parser.add_argument("--json", type=Path, default=None, help="write every row here (JSON)")
    parser.add_argument("--titan-page", type=Path, default=None, metavar="MD",
                        help="write the torchtitan rows' docs page here (docs/torchtitan.md)")
    parser.add_argument("--unseen", nargs="?", const="shipped", choices=("shipped", "routed"), default=None,
                        help="NeuSight labels with each GPU wholly unseen: a bundle trained without any of its rows "
                        "(with the shipped rules, or 'routed': the unseen protocol's routes) and the other GPUs' "
                        "pooled in-step calibration (benchmarks/emulate/e2e/unseen_bundles.py; a bundle is trained per "
                        "GPU on first use, 1-4 min)")
    parser.add_argument("--older-torch", default=OLDER_TORCH, metavar="VERSION",
                        help="torch release (its CUDA 12 build) that emulates GPUs the installed torch has no code "
                             "for (P100, P4, V100), in a throwaway environment; 'none': leave those rows refused "
                             f"(default {OLDER_TORCH})")
    args = parser.parse_args(argv)
    sources = [s.strip() for s in args.sources.split(",") if s.strip()]
    unknown = [s for s in sources if s not in SOURCES]
    if unknown:
        print(f"stepcast: unknown source(s) {', '.join(unknown)}; expected some of {', '.join(SOURCES)}",
              file=sys.stderr)
        return 2
    if args.quick and "torchtitan" in sources and args.sources == ",".join(SOURCES):
        sources.remove("torchtitan")
    root = args.root or shared_data_root()
    console = Console(width=200)
    started = time.perf_counter()
    out: dict[str, Any] = {"git_head": git_head(), "root": str(root)}

    if "neusight" in sources:
        labels, skipped = neusight.discover(root)
        if not labels and not skipped:
            print(f"stepcast: no NeuSight labels under {root / neusight.LABEL_DIR} (set STEPCAST_SHARED_DATA)",
                  file=sys.stderr)
            return 2
        modes = {m.strip() for m in args.modes.split(",")}
        chosen = [lb for lb in select_labels(labels, split(args.gpus), split(args.models), args.quick)
                  if lb.mode in modes]
        torch_for = interpreters(None if args.older_torch == "none" else args.older_torch)
        rows = run_rows(chosen, lambda lb: neusight_row(lb, args.fresh, torch_for, args.unseen),
                        lambda lb: f"{lb.hardware} {lb.path.stem}", console)
        means = neusight_tables(rows, console) if rows else {}
        console.print(held_out_protocol(rows, root), highlight=False)
        reasons = Counter(why for _, why in skipped)
        console.print("skipped labels: " + "; ".join(f"{n} {why}" for why, n in reasons.items()), highlight=False)
        out["neusight"] = {"rows": rows, "mean_per_gpu": means,
                           "skipped": [{"label": str(p), "why": why} for p, why in skipped]}

    if "nosync" in sources:
        row = nosync.check(args.fresh)
        nosync.print_table(row, console)
        out["nosync"] = row

    if "torchtitan" in sources:
        published, missing = titan_rows.published_rows(root)
        for path in missing:
            console.print(f"torchtitan: {path} is missing: its rows are not run", highlight=False)
        chosen = titan_rows.chosen(published, args.rows)
        rows = run_rows(chosen, lambda pub: torchtitan.run_row(pub, args.fresh, args.keep_traces),
                        lambda pub: pub.name, console)
        stats = torchtitan.print_table(rows, console) if rows else {}
        out["torchtitan"] = {"rows": rows, "summary": stats}
        if args.titan_page is not None and rows:
            command = page_command(argv if argv is not None else sys.argv[1:])
            write_bytes_atomic(args.titan_page, torchtitan.page(rows, out["git_head"], command).encode())

    out["wall_s"] = round(time.perf_counter() - started, 1)
    console.print(f"wall time {out['wall_s']:.0f} s (git {out['git_head'][:10]}; cached rows are not re-run)")
    if args.json:
        write_json_atomic(args.json, out)
    return 0


def split(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


if __name__ == "__main__":
    raise SystemExit(main())
