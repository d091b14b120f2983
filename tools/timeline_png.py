"""Draw a predicted timeline (the Chrome/Perfetto trace JSON that ``stepcast run --trace`` writes) as a PNG, for
docs/simulator.md: one row per track (a rank's host threads and streams), one bar per event, over one iteration.

    stepcast run --trace /tmp/timeline.json -- examples/gpt.py --layers 4 --d-model 1024 --heads 16 --seq 512 \\
        --batch 8 --steps 6
    python tools/timeline_png.py /tmp/timeline.json docs/timeline.png [--iteration -1]

What ui.perfetto.dev shows interactively, drawn with matplotlib from the same events, so the picture in the
docs is made by a command anyone can rerun."""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any


class TimelineError(ValueError):
    """A trace that is not a Chrome trace with complete ('X') events."""


def load_events(path: Path) -> list[dict[str, Any]]:
    """The trace's events (a JSON list, or an object with ``traceEvents``)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise TimelineError(f"{path}: not readable as JSON ({exc})") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list) or not any(e.get("ph") == "X" for e in events):
        raise TimelineError(f"{path}: expected a Chrome trace with complete ('X') events (stepcast run --trace)")
    return events


def track_names(events: list[dict[str, Any]]) -> dict[tuple[Any, Any], str]:
    """'<process> / <thread>' for every (pid, tid), from the trace's metadata events."""
    process = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    names = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[(e["pid"], e["tid"])] = f"{process.get(e['pid'], e['pid'])} / {e['args']['name']}"
    return names


def iteration_window(events: list[dict[str, Any]], iteration: int) -> tuple[float, float]:
    """(start, end) in µs of one iteration, from the trace's iteration markers when it has them, else all of it."""
    marks = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                   if e.get("ph") == "X" and str(e.get("name", "")).startswith("iteration"))
    if marks:
        return marks[iteration]
    spans = [(e["ts"], e["ts"] + e.get("dur", 0)) for e in events if e.get("ph") == "X"]
    return min(s for s, _ in spans), max(t for _, t in spans)


# legend groups for kernels, by what their (short) names say; other events keep their category (memcpy, sync ...)
KERNEL_KINDS = (("gemm", ("gemm", "matmul", "cublas")), ("attention", ("flash", "attention", "fmha")),
                ("norm / softmax / loss", ("norm", "softmax", "nll_loss", "reduce")),
                ("optimizer", ("multi_tensor_apply", "adam", "sgd")))


def kind(event: dict[str, Any]) -> str:
    """The legend entry of one event."""
    if event.get("cat") != "kernel":
        return str(event.get("cat") or "event")
    name = str(event.get("name", "")).lower()
    return next((label for label, words in KERNEL_KINDS if any(w in name for w in words)), "elementwise / other")


def draw(events: list[dict[str, Any]], out: Path, iteration: int = -1) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    start, end = iteration_window(events, iteration)
    names = track_names(events)
    tracks: dict[tuple[Any, Any], list[tuple[float, float, str]]] = defaultdict(list)
    for e in events:
        if e.get("ph") != "X" or e["ts"] + e.get("dur", 0) < start or e["ts"] > end:
            continue
        if str(e.get("name", "")).startswith("iteration"):
            continue
        tracks[(e["pid"], e["tid"])].append(((e["ts"] - start) / 1e3, e.get("dur", 0) / 1e3, kind(e)))
    order = sorted(tracks, key=lambda k: (str(k[0]), str(names.get(k, k))))
    colours = {}
    palette = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(12, 0.7 * len(order) + 1.6), dpi=110)
    for row, key in enumerate(order):
        by_cat: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for x, w, cat in tracks[key]:
            by_cat[cat].append((x, max(w, 1e-4)))
        for cat, bars in by_cat.items():
            colour = colours.setdefault(cat, palette(len(colours) % 10))
            ax.broken_barh(bars, (row - 0.4, 0.8), facecolors=colour, label=cat)
    ax.set_yticks(range(len(order)), [names.get(k, f"{k[0]} / {k[1]}") for k in order])
    ax.invert_yaxis()
    ax.set_xlim(0, (end - start) / 1e3)
    ax.set_xlabel("ms from the start of the iteration")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), loc="upper center", bbox_to_anchor=(0.5, -0.35), fontsize=8,
              ncol=min(len(unique), 4), frameon=False)
    ax.set_title("Predicted timeline (stepcast run --trace), one iteration")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp.png")
    fig.savefig(tmp, bbox_inches="tight")
    tmp.replace(out)  # temp file then rename: no half-written PNG
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/timeline_png.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", type=Path, help="the JSON written by stepcast run --trace")
    parser.add_argument("png", type=Path, help="the picture to write")
    parser.add_argument("--iteration", type=int, default=-1, help="which iteration (default -1: the last)")
    args = parser.parse_args(argv)
    try:
        draw(load_events(args.trace), args.png, args.iteration)
    except (TimelineError, IndexError) as exc:
        print(f"stepcast: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
