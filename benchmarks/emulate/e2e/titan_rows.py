"""torchtitan's published training runs (``torchtitan/benchmarks/*.md`` under the shared data folder), read into one
:class:`PublishedRow` per measured figure: what was trained (:class:`Recipe`: model, GPUs and board, parallel
degrees, pipeline schedule, local batch, sequence length, activation checkpointing, torch.compile, Float8 recipe,
async TP) and what was measured (tokens/s/GPU, peak memory in GiB where the file gives it).

Three files, three layouts:

- ``llama3_h100_202412_torchtitan.md``: ``**Table N** caption`` lines over markdown tables. The caption names the
  model, GPUs, local batch, activation checkpointing and (Tables 2, 4-6) the techniques and degrees every row
  shares; a row names its own techniques, degrees, sequence length or schedule.
- ``asyncTP_llama3_h100_2025-06_torchtitan.md``: a ``#### Llama3 70b on 256 H100s with FSDP=32, TP=8, ...`` heading
  over a table of quantization x (vanilla TP, async TP) tokens/s/GPU: two rows per table line.
- ``llama3-8b_h200_202506_trainy-whitefiber.md``: the ``torchrun`` command (its torchtitan flags) and a table of
  ``NUM_NODES`` x (TPS/GPU, memory), 8 GPUs a node.

What a file does not state is torchtitan's default at the time, the same for every row: sequence length 8192
(every llama3 config's ``training.seq_len``), FSDP over the GPUs no other degree takes, Float8 with tensorwise
scaling (the only recipe of 2024 and the default of the June 2025 converter), and the activation checkpointing of
the config the command names (llama3_8b: selective). torchao Float8 options a command states (the H200 file's
``enable_fsdp_float8_all_gather`` ...) are the recipe's ``float8_options``, passed to the trainer as they were.

The caching allocator runs with torch's defaults: the published memory says so where the launch is not stated
(``expandable_segments:True``, which torchtitan's own launch script sets, lowered the reserved peak of Table 3's FSDP
row by 2.6 GiB and of Table 4's 2D row by 3.8 GiB, from within 1 and 3 % of the published figures to 3 and 8 %
under them), and the H200 file's ``torchrun`` command sets nothing.

The board comes from the file's hardware section: the H100 files' 96 GB HBM2e boards at their 500 W limit are the
catalog's ``h100-sxm-96gb-500w``; the H200 nodes are ``h200``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

BENCHMARKS = Path("torchtitan/benchmarks")
FILES = ("llama3_h100_202412_torchtitan.md", "asyncTP_llama3_h100_2025-06_torchtitan.md",
         "llama3-8b_h200_202506_trainy-whitefiber.md")
DEFAULT_SEQ = 8192                  # every torchtitan llama3 config's training.seq_len, 2024 to 0.3.0
#: the Float8 options a command may state, as torchtitan of June 2025 (0.1.0) names them under ``--float8.``
FLOAT8_OPTIONS = ("enable_fsdp_float8_all_gather", "precompute_float8_dynamic_scale_for_fsdp",
                  "force_recompute_fp8_weight_in_bwd")
DEFAULT_FLOAT8 = "tensorwise"       # torchao's Float8LinearConfig default; the only torchtitan recipe in 2024
CONFIG_AC = {"8B": "selective", "70B": "full", "405B": "full"}  # torchtitan's llama3 configs' own checkpointing
GPUS_PER_NODE = 8                   # every published run: 8 GPUs a host
DEGREE = re.compile(r"\b(FSDP|TP|PP|CP)\s*=?\s*(\d+)")
SCHEDULE = re.compile(r"\b(Interleaved 1F1B|1F1B)\b")


class RowsError(ValueError):
    """A benchmark file that no longer reads as expected; the message names the file and what was expected."""


@dataclass(frozen=True)
class Recipe:
    """One training run's configuration, as torchtitan's command line expresses it."""

    flavor: str                      # torchtitan's llama3 flavor: 8B, 70B, 405B
    gpus: int
    hardware: str                    # catalog id of the board
    local_batch: int
    seq: int
    ac: str                          # selective | full
    compile: bool
    float8: str | None               # None (bf16) | tensorwise | rowwise
    async_tp: bool
    dp_shard: int
    tp: int = 1
    pp: int = 1
    cp: int = 1
    pp_schedule: str | None = None   # torchtitan's schedule name: 1F1B, Interleaved1F1B
    float8_options: tuple[str, ...] = ()   # of FLOAT8_OPTIONS, those the published command turned on

    @property
    def nodes(self) -> int:
        return max(1, self.gpus // GPUS_PER_NODE)

    @property
    def tokens_per_gpu_step(self) -> float:
        """Tokens one GPU's step trains, as torchtitan counts TPS/GPU: local batch x sequence over the ranks
        sharing it (tensor- and context-parallel peers split one sample between them, pipeline stages pass it
        along)."""
        return self.local_batch * self.seq / (self.tp * self.cp * self.pp)


@dataclass(frozen=True)
class PublishedRow:
    """One published measurement and the recipe it ran."""

    source: str
    table: str
    label: str
    recipe: Recipe
    tps_per_gpu: float
    memory_gib: float | None
    notes: tuple[str, ...] = field(default=())

    @property
    def name(self) -> str:
        return f"{self.table}: {self.label}"

    @property
    def step_ms(self) -> float:
        """The published step time: a GPU's tokens per step over its tokens per second."""
        return self.recipe.tokens_per_gpu_step / self.tps_per_gpu * 1e3

    def key(self) -> str:
        """A cache key that changes whenever the recipe does."""
        digest = hashlib.sha256(json.dumps(asdict(self.recipe), sort_keys=True).encode()).hexdigest()[:12]
        r = self.recipe
        return f"titan-{r.flavor}-{r.gpus}-{r.hardware}-{digest}"


def number(cell: str) -> float:
    return float(cell.replace(",", "").strip())


def markdown_rows(lines: list[str]) -> list[dict[str, str]]:
    """The first markdown table in ``lines``: one {column: cell} per body row."""
    header: list[str] | None = None
    rows: list[dict[str, str]] = []
    for line in lines:
        s = line.strip()
        if not s.startswith("|"):
            if header is not None:
                break
            continue
        cells = [c.strip() for c in s.strip("|").split("|")]
        if header is None:
            header = cells
        elif not all(set(c) <= set("-: ") for c in cells):
            rows.append(dict(zip(header, cells)))
    return rows


def sections(text: str, heading: re.Pattern[str]) -> list[tuple[re.Match[str], list[str]]]:
    """(heading match, the lines up to the next heading) for every line matching ``heading``."""
    out: list[tuple[re.Match[str], list[str]]] = []
    for line in text.splitlines():
        m = heading.match(line.strip())
        if m:
            out.append((m, []))
        elif out:
            out[-1][1].append(line)
    return out


def hardware_of(text: str, path: str) -> str:
    """The catalog board a file's hardware section describes."""
    if "H200" in text:
        return "h200"
    if "H100" in text and "96GB HBM2e" in text and "500W" in text:
        return "h100-sxm-96gb-500w"
    raise RowsError(f"{path}: hardware section names neither H200 nor 96GB HBM2e H100s at 500W")


def degrees(text: str) -> dict[str, int]:
    return {name: int(value) for name, value in DEGREE.findall(text)}


def ac_of(text: str, flavor: str) -> str:
    low = text.lower()
    if "full activation checkpointing" in low or "full ac" in low:
        return "full"
    if "selective activation checkpointing" in low or re.search(r"\bsac\b", low):
        return "selective"
    return CONFIG_AC[flavor]


def make_recipe(path: str, where: str, *, flavor: str, gpus: int, hardware: str, local_batch: int, seq: int, ac: str,
                compile_: bool, float8: str | None, async_tp: bool, found: dict[str, int],
                schedule: str | None) -> Recipe:
    """A recipe from the degrees a file names (FSDP takes the GPUs the others leave, as torchtitan's -1 does)."""
    tp, pp, cp = found.get("TP", 1), found.get("PP", 1), found.get("CP", 1)
    dp = found.get("FSDP", gpus // (tp * pp * cp))
    if dp * tp * pp * cp != gpus:
        raise RowsError(f"{path}: {where}: FSDP {dp} x TP {tp} x PP {pp} x CP {cp} is not the {gpus} GPUs")
    if pp > 1 and schedule is None:
        raise RowsError(f"{path}: {where}: pipeline parallel without a schedule")
    return Recipe(flavor=flavor, gpus=gpus, hardware=hardware, local_batch=local_batch, seq=seq, ac=ac,
                  compile=compile_, float8=float8, async_tp=async_tp, dp_shard=dp, tp=tp, pp=pp, cp=cp,
                  pp_schedule=schedule.replace(" ", "") if pp > 1 and schedule else None)


def rows_2024(text: str, path: str) -> list[PublishedRow]:
    """``llama3_h100_202412_torchtitan.md``: every row of Tables 1-6."""
    hardware = hardware_of(text, path)
    out = []
    for m, lines in sections(text, re.compile(r"\*\*Table (\d+)\*\*\s*(.*)")):
        table, caption = f"Table {m[1]}", m[2]
        flavor = re.search(r"Llama 3\.1 (\d+B)", caption)
        gpus = re.search(r"(\d+) GPUs", caption)
        batch = re.search(r"Local batch size (\d+)", caption)
        if not (flavor and gpus and batch):
            raise RowsError(f"{path}: {table} caption lacks the model, GPU count or local batch: {caption!r}")
        rows = markdown_rows(lines)
        if not rows:
            raise RowsError(f"{path}: {table} has no rows")
        for row in rows:
            label_col = next(iter(row))
            label = row[label_col]
            both = f"{caption} {label}"
            sched = SCHEDULE.search(row.get("Schedule", "")) or SCHEDULE.search(caption)
            recipe = make_recipe(
                path, f"{table} {label!r}", flavor=flavor[1], gpus=int(gpus[1]), hardware=hardware,
                local_batch=int(batch[1]), seq=int(number(row["Sequence Length"])) if "Sequence Length" in row
                else DEFAULT_SEQ, ac=ac_of(caption, flavor[1]), compile_="torch.compile" in both,
                float8=DEFAULT_FLOAT8 if "Float8" in both else None, async_tp="AsyncTP" in both,
                found={**degrees(caption), **degrees(label)}, schedule=sched[1] if sched else None)
            out.append(PublishedRow(source=Path(path).name, table=table, label=label, recipe=recipe,
                                    tps_per_gpu=number(row["TPS/GPU"]), memory_gib=number(row["Memory(GiB)"])))
    return out


def rows_async_tp(text: str, path: str) -> list[PublishedRow]:
    """``asyncTP_llama3_h100_2025-06_torchtitan.md``: each quantization line gives a vanilla-TP and an async-TP row
    (the file publishes no memory)."""
    hardware = hardware_of(text, path)
    out = []
    heading = re.compile(r"#+\s*Llama3 (\d+)b on (\d+) H100s with (.*)", re.IGNORECASE)
    for m, lines in sections(text, heading):
        flavor, gpus, setup = f"{m[1]}B", int(m[2]), m[3]
        batch = re.search(r"local batch size (\d+)", setup)
        if not batch:
            raise RowsError(f"{path}: heading {m[0]!r} lacks the local batch size")
        rows = markdown_rows(lines)
        if not rows:
            raise RowsError(f"{path}: heading {m[0]!r} has no table")
        for row in rows:
            quant = row["Quantization"]
            float8 = next((r for r in ("tensorwise", "rowwise") if r in quant.lower()), None)
            if "float8" in quant.lower() and float8 is None:
                raise RowsError(f"{path}: quantization {quant!r} names no Float8 recipe")
            for column, async_tp in (("Vanilla TP tokens/sec", False), ("Async TP tokens/sec", True)):
                recipe = make_recipe(
                    path, f"{m[0]!r} {quant!r}", flavor=flavor, gpus=gpus, hardware=hardware,
                    local_batch=int(batch[1]), seq=DEFAULT_SEQ, ac=ac_of(setup, flavor),
                    compile_="torch.compile" in setup, float8=float8, async_tp=async_tp, found=degrees(setup),
                    schedule=None)
                label = f"{'async' if async_tp else 'vanilla'} TP, {quant}"
                out.append(PublishedRow(source=Path(path).name, table=f"async TP {flavor} {gpus} GPUs", label=label,
                                        recipe=recipe, tps_per_gpu=number(row[column]), memory_gib=None))
    return out


def flag(command: str, name: str) -> str | None:
    """A ``--name=value`` / ``--name value`` flag's value in a shell command ('' for a bare switch, None absent)."""
    m = re.search(rf"--{re.escape(name)}(?:[= ]+(?!--)(\S+))?(?=\s|$)", command)
    if not m:
        return None
    return (m[1] or "").strip("\"'")


def rows_h200(text: str, path: str) -> list[PublishedRow]:
    """``llama3-8b_h200_202506_trainy-whitefiber.md``: the command's torchtitan flags, one row per node count."""
    hardware = hardware_of(text, path)
    block = re.search(r"```(.*?)```", text, re.S)
    if not block:
        raise RowsError(f"{path}: no command block")
    command = " ".join(block[1].replace("\\\n", " ").split())
    toml = re.search(r"llama3_(\d+b)\.toml", command)
    per_node = flag(command, "nproc_per_node")
    batch = flag(command, "training.local_batch_size")
    if not (toml and per_node and batch):
        raise RowsError(f"{path}: the command lacks the model toml, --nproc_per_node or --training.local_batch_size")
    flavor = toml[1].upper()
    float8 = DEFAULT_FLOAT8 if "float8" in (flag(command, "model.converters") or "") else None
    options = tuple(name for name in FLOAT8_OPTIONS if flag(command, f"quantize.linear.float8.{name}") is not None)
    out = []
    for row in markdown_rows(text.splitlines()):
        if "NUM_NODES" not in row:
            continue
        gpus = int(row["NUM_NODES"]) * int(per_node)
        recipe = make_recipe(path, f"NUM_NODES {row['NUM_NODES']}", flavor=flavor, gpus=gpus, hardware=hardware,
                             local_batch=int(batch), seq=DEFAULT_SEQ, ac=CONFIG_AC[flavor],
                             compile_=flag(command, "training.compile") is not None, float8=float8, async_tp=False,
                             found={}, schedule=None)
        out.append(PublishedRow(source=Path(path).name, table=f"H200 {flavor}", label=f"FSDP {gpus} GPUs",
                                recipe=dataclasses.replace(recipe, float8_options=options),
                                tps_per_gpu=number(row["TPS/GPU"]), memory_gib=number(row["Memory(GiB)"])))
    if not out:
        raise RowsError(f"{path}: no NUM_NODES rows")
    return out


PARSERS = {FILES[0]: rows_2024, FILES[1]: rows_async_tp, FILES[2]: rows_h200}


def published_rows(root: Path) -> tuple[list[PublishedRow], list[str]]:
    """Every row of the three files under the shared data ``root``, and the files that are missing."""
    rows: list[PublishedRow] = []
    missing = []
    for name, parse in PARSERS.items():
        path = root / BENCHMARKS / name
        if not path.is_file():
            missing.append(str(path))
            continue
        rows += parse(path.read_text(), str(path))
    return rows, missing


def chosen(rows: list[PublishedRow], wanted: str | None) -> list[PublishedRow]:
    """The rows ``--rows`` names: the one whose whole name it is, else those whose name contains any of its
    comma-separated parts (a row's name may hold a comma, so the whole string is tried first); every row for none."""
    if not wanted:
        return rows
    exact = [row for row in rows if row.name == wanted.strip()]
    parts = [part.strip() for part in wanted.split(",") if part.strip()]
    return exact or [row for row in rows if any(part in row.name for part in parts)]
