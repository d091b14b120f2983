"""Model cards for exported bundles: data (with credits), features, metrics on each split, version."""
from __future__ import annotations

import importlib.metadata
import platform
from pathlib import Path
from typing import Any

import pandas as pd

from stepcast.estimator.bundle import write_json_atomic
from stepcast.profiling.atomic import write_bytes_atomic

#: credit line per training-data source (the shared data's licences; README.md of ../shared/data)
CREDITS: dict[str, str] = {
    "vidur": "data from microsoft/vidur, MIT",
    "neusight": "data from sitar-lab/NeuSight, MIT",
    "kineto": "traces from facebookresearch/HolisticTraceAnalysis (MIT) and pytorch/kineto (BSD-3-Clause)",
    "llmcompass": "data from PrincetonUniversity/LLMCompass, BSD-3-Clause",
    "profiler": "this project's profiler datasets (datasets/<hardware>/, Apache-2.0)",
    "aiconfigurator": "data from ai-dynamo/aiconfigurator (NVIDIA), Apache-2.0",
    "kernelbench": "timings from ScalingIntelligence/KernelBench, MIT",
}
CONV_SECTION = "## Convolution families"
POWER_SECTION = "## Power floor"
#: the libraries whose builds decide a trained model: the same code and data trained with other releases gives other
#: trees and weights (2026-12-05.1's kernel-family models differ from 2026-12-03.3's for that reason alone)
TRAINING_LIBRARIES = ("xgboost", "scikit-learn", "torch", "numpy", "pandas", "scipy")


def trained_with() -> dict[str, str]:
    """Python's and each of ``TRAINING_LIBRARIES``' installed versions (a library not installed is left out)."""
    found = {"python": platform.python_version()}
    for name in TRAINING_LIBRARIES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def markdown_table(frame: pd.DataFrame) -> str:
    def cell(v: Any) -> str:
        return f"{v:.2f}" if isinstance(v, float) else str(v)

    head = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "---|" * len(frame.columns)
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *body])


def data_summary(frame: pd.DataFrame) -> list[dict[str, Any]]:
    counts = frame.groupby(["family", "source", "hardware"], sort=True).size()
    return [{"family": f, "source": s, "hardware": h, "rows": int(n)} for (f, s, h), n in counts.items()]


def write_card(path: Path, *, version: str, model_kind: str, target: str, fallback_rule: str,
               frame: pd.DataFrame, features: dict[str, list[str]], metrics: pd.DataFrame,
               params: dict[str, Any], notes: list[str] | None = None,
               family_models: dict[str, dict[str, Any]] | None = None,
               routing: dict[str, Any] | None = None) -> None:
    """Write card.json (machine-readable) and card.md (for people) into the bundle folder. ``family_models``:
    families fitted with another kind than ``model_kind`` (family -> kind and params); ``routing``: the routed
    families' routes and the unseen-protocol figures that chose them (``estimator.train.routed_candidates``)."""
    path = Path(path)
    sources = sorted(frame["source"].astype(str).unique())
    family_models = family_models or {}
    card = {
        "version": version, "model": model_kind, "target": target, "fallback_rule": fallback_rule,
        "params": params, "family_models": family_models, "credits": [CREDITS.get(s, s) for s in sources],
        "data": data_summary(frame), "features": features, "metrics": metrics.to_dict(orient="records"),
        "notes": notes or [], "trained_with": trained_with(),
    }
    if routing:
        card["routing"] = routing | {"rule": ROUTING_RULE, "fallbacks": ROUTING_FALLBACKS}
    write_json_atomic(path / "card.json", card)
    others = "".join(f"; {family}: **{m['kind']}** ({', '.join(f'{k}={v}' for k, v in m['params'].items())})"
                     for family, m in family_models.items())
    lines = [
        f"# Kernel-runtime estimator bundle `{path.name}` (version {version})", "",
        f"Model: **{model_kind}**, one per family, target `{target}` "
        f"({'log(runtime / roofline baseline)' if target == 'efficiency' else 'log(runtime)'}){others}. "
        f"Families without a model, and rows outside the training support by rule `{fallback_rule}`, "
        "use the roofline/alpha-beta estimator (estimator/analytical.py).", "",
        "## Data", "", *[f"- {c}" for c in card["credits"]], "",
        "| family | source | hardware | rows |", "|---|---|---|---|",
        *[f"| {d['family']} | {d['source']} | {d['hardware']} | {d['rows']} |" for d in card["data"]], "",
        "## Features", "",
        *[f"- {family}: {', '.join(names)}" for family, names in features.items()], "",
        "## Metrics (held-out rows, APE in %)", "",
        f"`{model_kind}`{''.join(f' (`{m}`)' for m in sorted({m['kind'] for m in family_models.values()}))} and "
        f"`roofline`: each model alone. `bundle`: what this bundle predicts on the same rows, the "
        f"learned model or, where the family's fallback rule sends a row, the roofline.", "",
        markdown_table(metrics) if len(metrics) else "(none)", "",
        *(routing_lines(routing) if routing else []),
        *(["## Notes", "", *[f"- {n}" for n in notes], ""] if notes else []),
        "## Trained with", "", "Other releases of these train other trees and weights from the same code and data.", "",
        *[f"- {name} {version}" for name, version in card["trained_with"].items()], "",
    ]
    write_bytes_atomic(path / "card.md", "\n".join(lines).encode())


ROUTING_RULE = ("Each row runs the model its family's routes name for its (device, dtype) and situation. Seen (the "
                "training data has rows of that device and dtype): the candidate with the lowest mean APE on the "
                "unseen protocol's within-device split (a fifth of the shapes held out) for that device and dtype "
                "(fewer than 20 rows: over every device). Sibling (none, but a device of the same SM design, the "
                "same compute capability, has rows of that dtype) and unseen (neither): the one lowest on the "
                "device split (each device held out whole) pooled over the held-out GPUs' rows of that dtype in the "
                "same situation (fewer than 20 rows: over every dtype), among the bounded models (not the MLP, "
                "whose output past its training inputs has no bound). A challenger replaces the shipped kind only "
                "where it is lower by more than the larger of the two ranges over seeds.")
ROUTING_FALLBACKS = ("A row whose device's spec lies outside what the routed learned model was trained on takes the "
                     "roofline (rule unsupported_spec); a route naming a model the bundle lacks runs the family's "
                     "primary model; a collective's device counts as seen as the NCCL model judges it (a device "
                     "with a fitted device's catalog links takes its figures), whatever the dtype.")


def routing_lines(routing: dict[str, Any]) -> list[str]:
    """card.md's routing section: the rule, the fallbacks, each choice with every candidate's figure."""
    results = routing.get("results", {})
    lines = ["## Routing", "", ROUTING_RULE, "", ROUTING_FALLBACKS, "",
             f"Chosen from `{results.get('path')}` (commit `{str(results.get('commit'))[:12]}`, "
             f"{results.get('seeds')} seeds). Figures: mean APE % over the seeds (range over the seeds).", "",
             "| family | side | (device/)dtype | rows | chosen | candidates |", "|---|---|---|---|---|---|"]
    for c in routing.get("choices", []):
        options = "; ".join(f"{m} {sum(v) / len(v):.1f} ({max(v) - min(v):.1f})"
                            for m, v in sorted(c["options"].items(), key=lambda kv: sum(kv[1]) / len(kv[1])))
        lines.append(f"| {c['family']} | {c['side']} | {'default' if c['key'] == '*' else c['key']} | "
                     f"{c['rows']:,} | {c['chosen'] or '(default)'} | {options} |")
    return lines + [""]


def add_conv_families(path: Path, table: Any) -> None:
    """Record a bundle's convolution-family table (:mod:`estimator.conv_families`) in its card: its factors, the
    GPUs it was fitted on and KernelBench's credit (card.json ``conv_families``; card.md's section is replaced)."""
    import json

    path = Path(path)
    card_path = path / "card.json"
    card = json.loads(card_path.read_text()) if card_path.is_file() else {}
    doc = table.to_json()
    card["conv_families"] = {"factor": doc["factor"], "problems": doc["problems"], "prior": doc["prior"],
                             "gpus": table.meta.get("gpus", [])}
    credits = card.get("credits", [])
    card["credits"] = credits + [CREDITS["kernelbench"]] * (CREDITS["kernelbench"] not in credits)
    write_json_atomic(card_path, card)
    lines = [CONV_SECTION, "",
             "cuDNN convolution calls timed as an implicit GEMM are scaled by the factor of the kernel family cuDNN "
             "ran (`estimator/conv_families.py`, `conv_families.json`): the median log(measured / predicted) of "
             f"KernelBench's level-1 eager convolution forwards, shrunk by {doc['prior']:g} pseudo-problems, fitted "
             f"on {', '.join(table.meta.get('gpus', []))} ({CREDITS['kernelbench']}).", "",
             "| family | factor | problems |", "|---|---|---|",
             *[f"| {f} | {v:.3f} | {doc['problems'].get(f, 0)} |" for f, v in doc["factor"].items()], ""]
    _replace_section(path / "card.md", CONV_SECTION, lines)


def _replace_section(md_path: Path, heading: str, lines: list[str]) -> None:
    """card.md with its ``heading`` section (up to the next ``## `` heading) replaced by ``lines``, appended last."""
    text = md_path.read_text() if md_path.is_file() else ""
    head, _, rest = text.partition(heading)
    tail = rest[rest.find("\n## "):] if rest and rest.find("\n## ") >= 0 else ""
    text = (head.rstrip("\n") + ("\n" + tail if tail else "")).rstrip("\n")
    write_bytes_atomic(md_path, "\n".join([text, "", *lines]).encode())


def add_power_floor(path: Path, floor: Any) -> None:
    """Record a bundle's power floor (:mod:`estimator.power_floor`) in its card: the rule, each (silicon, dtype)
    figure with the device it comes from, the sources and how often it binds on the training rows (card.json
    ``power_floor``; card.md's section is replaced)."""
    import json

    from stepcast.estimator.power_floor import FILENAME, RULE

    path = Path(path)
    card_path = path / "card.json"
    card = json.loads(card_path.read_text()) if card_path.is_file() else {}
    card["power_floor"] = {"file": FILENAME, "rule": RULE, "joules_per_flop": floor.joules_per_flop,
                           "boards": floor.boards, "sources": floor.meta.get("sources", []),
                           "devices": floor.meta.get("devices", []),
                           "binds_measured": floor.meta.get("binds_measured"),
                           "binds_predicted": floor.meta.get("binds_predicted")}
    write_json_atomic(card_path, card)

    def binds(b: dict | None, what: str) -> str:
        if not b:
            return f"- {what}: not checked"
        return (f"- {what}: raised {b['raised']:,} of {b['rows']:,} rows with a floor (largest raise "
                f"{b['max_raise'] * 100:.2f} %, median {b['median_raise'] * 100:.2f} %)")

    lines = [POWER_SECTION, "",
             f"Every GEMM prediction, whichever model made it, is raised to the least time its board's power allows "
             f"(`estimator/power_floor.py`, `{FILENAME}`; rows raised are labelled `+power_floor`): {RULE}. Fitted on "
             f"{', '.join(floor.meta.get('sources', []))} (aiconfigurator's fp8 rows only as evidence of the fp8 "
             f"datapath's energy, not as training rows).", "",
             "| silicon/dtype | pJ per FLOP | from | watts | sustained TFLOP/s |", "|---|---|---|---|---|",
             *[f"| {d['key']} | {d['picojoules_per_flop']:.4f} | {d['device']} | {d['watts']:g} | "
               f"{d['sustained_tflops']:g} |" for d in floor.meta.get("devices", [])
               if floor.boards.get(d["key"]) == d["device"]], "",
             binds(floor.meta.get("binds_measured"), "on the measured training rows"),
             binds(floor.meta.get("binds_predicted"), "on this bundle's predictions of its GEMM training rows"), ""]
    _replace_section(path / "card.md", POWER_SECTION, lines)
