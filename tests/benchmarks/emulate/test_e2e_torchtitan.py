"""benchmarks.emulate.e2e.torchtitan: each published row's torchtitan command line and sparse ranks, the summary over
rows, and the rule of issue 34 that nothing in the benchmark is particular to a row (no published figure, no label, no
correction factor in its code)."""
from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from benchmarks.emulate.e2e import torchtitan
from benchmarks.emulate.e2e.titan_rows import PublishedRow, Recipe, published_rows
from stepcast.profiling.paths import REPO_ROOT

#: what runs and summarises the rows: none of it may name a row or carry a number fitted to one
BENCHMARK_CODE = [REPO_ROOT / p for p in ("benchmarks/emulate/e2e/torchtitan.py",
                                         "benchmarks/emulate/e2e/titan_rows.py",
                                         "benchmarks/emulate/e2e/kernel_classes.py",
                                         "benchmarks/emulate/e2e/titan_stack.py",
                                         "examples/torchtitan_v010_specs.py", "examples/torchtitan_v010_train.py")]


def recipe(**changes) -> Recipe:
    base = Recipe(flavor="405B", gpus=512, hardware="h100-sxm-96gb-500w", local_batch=32, seq=8192, ac="full",
                  compile=True, float8="tensorwise", async_tp=True, dp_shard=8, tp=8, pp=8,
                  pp_schedule="Interleaved1F1B")
    return dataclasses.replace(base, **changes)


def row(tps: float, predicted: float | None, memory: float | None = None, predicted_memory: float | None = None,
        table: str = "Table 1") -> dict:
    """A row as run_row returns it (predicted None: failed)."""
    out = {"ok": predicted is not None, "published": {"tps_per_gpu": tps, "memory_gib": memory},
           "name": f"{table}: {tps:g}", "table": table}
    if predicted is not None:
        out.update(tps_per_gpu=predicted, tps_error=(predicted - tps) / tps * 100)
        if memory is not None and predicted_memory is not None:
            out["memory_error"] = (predicted_memory - memory) / memory * 100
    return out


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_a_pipeline_row_runs_torchtitans_flags_with_as_many_microbatches_as_stages():
    args = torchtitan.trainer_args(recipe())
    assert (flag(args, "--model.name"), flag(args, "--model.flavor")) == ("llama3", "405B")
    assert flag(args, "--parallelism.pipeline_parallel_schedule") == "Interleaved1F1B"
    # Interleaved 1F1B: two stages per rank, 16 in all, so 32 samples go in 16 microbatches of 2; 1F1B: 8 of 4
    assert flag(args, "--parallelism.pipeline_parallel_microbatch_size") == "2"
    one_f_one_b = torchtitan.trainer_args(dataclasses.replace(recipe(), pp_schedule="1F1B"))
    assert flag(one_f_one_b, "--parallelism.pipeline_parallel_microbatch_size") == "4"
    assert [flag(args, f"--parallelism.{d}_parallel_degree") for d in ("tensor", "pipeline", "context")] == \
        ["8", "8", "1"]
    assert {"--training.compile", "--parallelism.enable-async-tensor-parallel"} <= set(args)
    assert flag(args, "--activation_checkpoint.mode") == "full"
    assert "--activation_checkpoint.selective_ac_option" not in args


def test_float8_rows_keep_the_output_projection_in_bf16_and_name_only_non_default_recipes():
    tensorwise = torchtitan.trainer_args(recipe())
    assert flag(tensorwise, "--model.converters") == "float8" and flag(tensorwise, "--float8.filter_fqns") == "output"
    assert "--float8.recipe_name" not in tensorwise              # 0.1.0: tensorwise when no recipe is named
    assert flag(torchtitan.trainer_args(recipe(float8="rowwise")), "--float8.recipe_name") == "rowwise"
    stated = torchtitan.trainer_args(recipe(float8_options=("enable_fsdp_float8_all_gather",)))
    assert "--float8.enable-fsdp-float8-all-gather" in stated


def test_a_bf16_row_without_pipeline_names_no_schedule():
    args = torchtitan.trainer_args(recipe(float8=None, pp=1, pp_schedule=None, dp_shard=64, async_tp=False,
                                          compile=False, ac="selective"))
    assert "--model.converters" not in args
    assert "--parallelism.pipeline_parallel_schedule" not in args
    assert {"--training.no-compile", "--parallelism.no-enable-async-tensor-parallel"} <= set(args)
    assert flag(args, "--activation_checkpoint.selective_ac_option") == "op"


def test_multi_node_rows_run_one_rank_per_pipeline_stage_and_single_nodes_every_rank():
    assert torchtitan.run_ranks(recipe()) == [0, 64, 128, 192, 256, 320, 384, 448]
    assert torchtitan.run_options(recipe()) == ["--nodes", "64", "--run-ranks", "0,64,128,192,256,320,384,448"]
    assert torchtitan.run_ranks(recipe(gpus=64, dp_shard=8, pp=1, pp_schedule=None)) == [0]
    assert torchtitan.run_ranks(recipe(gpus=8, dp_shard=8, tp=1, pp=1, pp_schedule=None)) is None
    assert torchtitan.run_options(recipe(gpus=8, dp_shard=8, tp=1, pp=1, pp_schedule=None)) == []


def test_a_rows_cache_key_changes_with_its_recipe_and_its_files_software():
    from benchmarks.emulate.e2e.titan_stack import STACK_2024, STACKS

    old, new = sorted(STACKS, key=lambda s: STACKS[s] != STACK_2024)[::len(STACKS) - 1]
    pub = PublishedRow(old, "Table 5", "x", recipe(), 128.0, 72.7)
    other = dataclasses.replace(pub, recipe=recipe(pp_schedule="1F1B"))
    assert torchtitan.row_key(pub) != torchtitan.row_key(other)
    assert torchtitan.row_key(pub) == torchtitan.row_key(dataclasses.replace(pub, tps_per_gpu=1.0))
    assert STACKS[old] != STACKS[new]
    assert torchtitan.row_key(pub) != torchtitan.row_key(dataclasses.replace(pub, source=new))


def test_the_summary_gives_mean_and_worst_error_and_spearman_over_the_rows_that_ran():
    rows = [row(100, 110, 80, 84), row(200, 180), row(300, 330), row(400, None)]
    out = torchtitan.summary(rows)
    assert (out["rows"], out["ran"], out["failed"]) == (4, 3, 1)
    assert out["mean_abs_tps_error"] == pytest.approx(10.0)
    assert out["worst_abs_tps_error"] == pytest.approx(10.0)
    assert out["spearman"] == pytest.approx(1.0)
    assert out["mean_abs_memory_error"] == pytest.approx(5.0)
    swapped = torchtitan.summary([row(100, 300), row(200, 200), row(300, 100)])
    assert swapped["spearman"] == pytest.approx(-1.0) and swapped["worst_abs_tps_error"] == pytest.approx(200.0)
    assert torchtitan.summary([row(100, 110), row(200, None)])["spearman"] is None   # below three rows


def test_pairs_within_a_table_are_checked_for_the_published_order_and_tables_are_not_mixed():
    rows = [row(100, 110), row(120, 150), row(130, 140, table="Table 2"), row(90, 150, table="Table 2"),
            row(50, 60, table="Table 3"), row(80, None, table="Table 3")]
    pairs = torchtitan.order_pairs(rows)
    assert [(p["first"], p["second"], p["agrees"]) for p in pairs] == \
        [("Table 1: 100", "Table 1: 120", True), ("Table 2: 130", "Table 2: 90", False)]
    stats = torchtitan.summary(rows)
    assert (stats["pairs"], stats["pairs_in_order"]) == (2, 1)
    assert "1 of 2" in torchtitan.summary_line(stats)
    first = torchtitan.wrong_order_line(stats["wrong_order"][0])
    assert first.startswith("wrong order: Table 2: 90 over Table 2: 130")
    assert torchtitan.wrong_order_line(stats["wrong_order"][0]).startswith("wrong order: Table 2: 90 over Table 2: 130")


DEGREE_NAMES = ("FSDP", "TP", "PP", "CP")   # the parser's vocabulary (Table 1's first row is just "FSDP")
UNITS = (100.0, 1000.0)   # percent and milliseconds: Table 5's 1F1B row publishes 100 TPS/GPU


def published_figures(rows: list[PublishedRow]) -> set[str]:
    """Every published TPS/GPU, memory and step time as it could be written in code."""
    out: set[str] = set()
    for r in rows:
        for value in (r.tps_per_gpu, r.memory_gib, r.step_ms):
            if value is None or value in UNITS:
                continue
            out |= {f"{value:g}", f"{value:,.0f}", f"{value:.1f}", f"{value:.2f}"} if value >= 10 else set()
    return {s for s in out if len(s.replace(",", "").replace(".", "")) >= 3}   # short numbers say nothing


@pytest.mark.shared_data
def test_the_benchmark_carries_no_published_figure_label_or_fitted_number(shared_data: Path):
    """issue 34: the same estimators and settings for every row. No published TPS/GPU, memory or step time, no
    row label and no fractional constant (a correction factor) appears in the code that runs the rows."""
    rows, _ = published_rows(shared_data)
    figures = published_figures(rows)
    labels = ({r.label for r in rows} | {r.table for r in rows}) - set(DEGREE_NAMES)
    for path in BENCHMARK_CODE:
        text = path.read_text()
        tree = ast.parse(text)
        literals = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)]
        strings = [s for s in literals if isinstance(s, str)]
        numbers = [v for v in literals if isinstance(v, (int, float)) and not isinstance(v, bool)]
        for figure in figures:
            assert not re.search(rf"(?<![\w.,]){re.escape(figure)}(?![\w]|\.\d)", text), f"{path}: {figure}"
        assert not [s for s in strings if s in labels], f"{path} names a published row"
        fractional = [v for v in numbers if isinstance(v, float) and v not in (0.0, 1e3, 100.0, 3600.0)]
        assert not fractional, f"{path}: fractional constants {fractional}"


def test_the_2024_rows_run_the_trainer_that_kept_its_loss_eager_and_the_2025_rows_torchtitans_own():
    old = PublishedRow("llama3_h100_202412_torchtitan.md", "Table 1", "FSDP", recipe(), 1.0, 1.0)
    new = PublishedRow("asyncTP_llama3_h100_2025-06_torchtitan.md", "x", "y", recipe(), 1.0, None)
    old_args, new_args = torchtitan.row_args(old), torchtitan.row_args(new)
    assert flag(old_args, "--model.name") == "llama3_eager_loss"
    assert flag(old_args, "--experimental.custom_import") == "torchtitan_v010_specs"
    assert flag(new_args, "--model.name") == "llama3" and "--experimental.custom_import" not in new_args
    assert torchtitan.row_key(old) != torchtitan.row_key(dataclasses.replace(old, source=new.source))


def test_the_docs_page_lists_every_row_with_its_error_and_names_the_commit_and_command():
    ran = row(100, 110, 80, 84) | {"name": "Table 1: FSDP", "hardware": "h", "iteration_ms": 5.0, "wall_s": 3.0,
                                    "memory_gib": 84.0, "breakdown_ms": {"compute": 4.0}, "families_ms": {"gemm": 3.0},
                                    "published": {"tps_per_gpu": 100, "memory_gib": 80, "step_ms": 5.5}}
    failed = row(200, None) | {"name": "Table 5: 1F1B", "hardware": "h", "error": "x | y", "wall_s": 1.0,
                               "published": {"tps_per_gpu": 200, "memory_gib": None, "step_ms": 1.0}}
    text = torchtitan.page([ran, failed], "0123456789abcdef", "python -m benchmarks.emulate.e2e --sources torchtitan")
    assert "commit 0123456789" in text and "`python -m benchmarks.emulate.e2e --sources torchtitan`" in text
    table = [ln for ln in text.splitlines() if ln.startswith("| Table")]
    assert len(table) == 2 and "+10.0 %" in table[0] and "failed: x / y" in table[1]
    assert "1 failed" in text


def test_a_float8_recipe_the_stack_cannot_look_up_is_refused_not_run_in_bf16():
    """torchtitan 0.1.0 on torchao 0.8.0 warns and trains a rowwise row in bf16; the row must fail, not report."""
    from benchmarks.emulate.e2e.titan_stack import STACK_2024, STACK_2025, STACKS

    assert STACK_2024.unsupported("tensorwise") is None and STACK_2024.unsupported(None) is None
    assert "torchao" in STACK_2024.unsupported("rowwise") and STACK_2025.unsupported("rowwise") is None
    source = next(s for s, stack in STACKS.items() if stack == STACK_2024)
    out = torchtitan.emulate_row(PublishedRow(source, "t", "rowwise", recipe(float8="rowwise"), 1.0, None))
    assert out["ok"] is False and "rowwise" in out["error"]


def test_every_benchmark_file_has_a_stack_and_an_unknown_file_is_refused_in_one_line(shared_data: Path):
    from benchmarks.emulate.e2e import titan_stack

    rows, problems = published_rows(shared_data)
    assert not problems and {r.source for r in rows} == set(titan_stack.STACKS)
    with pytest.raises(KeyError, match="new.md.*STACKS"):
        titan_stack.stack_of("new.md")



def test_keeping_traces_emulates_the_row_again_into_a_folder_named_by_its_key(tmp_path, monkeypatch):
    published = PublishedRow(source="llama3_h100_202412_torchtitan.md", table="Table 5", label="1F1B",
                             recipe=recipe(pp_schedule="1F1B"), tps_per_gpu=100.0, memory_gib=None)
    runs = []

    def emulate(row, trace_dir=None):
        runs.append(trace_dir)
        return {"ok": False, "error": "not run here", "wall_s": 0.0, "peak_rss_bytes": 0}

    monkeypatch.setattr(torchtitan, "emulate_row", emulate)
    monkeypatch.setenv("STEPCAST_CACHE_DIR", str(tmp_path / "cache"))
    torchtitan.run_row(published)
    torchtitan.run_row(published)                       # cached: not emulated again, no traces asked for
    torchtitan.run_row(published, keep_traces=tmp_path / "kept")
    assert runs == [None, tmp_path / "kept" / torchtitan.row_key(published)]
