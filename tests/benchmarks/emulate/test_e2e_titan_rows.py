"""benchmarks.emulate.e2e.titan_rows: every row of torchtitan's three benchmark files read with the recipe it ran."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from benchmarks.emulate.e2e import titan_rows
from benchmarks.emulate.e2e.titan_rows import (
    RowsError,
    published_rows,
    rows_2024,
    rows_async_tp,
    rows_h200,
)

HARDWARE_H100 = ("- Each H100 GPU is equipped with 96GB HBM2e with 2.4 TB/sec peak memory bandwidth.\n"
                 "- We used the default 500W power limit.\n")

TABLES_2024 = HARDWARE_H100 + """
**Table 2** FSDP + CP + torch.compile + Float8. Llama 3.1 8B model. 8 GPUs. Local batch size 1. Full activation checkpointing.

| Parallelism | Sequence Length | TPS/GPU | Memory(GiB) |
| ----- | ----: | ----: | ----: |
| FSDP 4, CP 2 | 65536 | 2,540 | 84.2 |

**Table 5** 3D parallelism (FSDP + TP + PP) + torch.compile + Float8 + AsyncTP. Llama 3.1 405B model. 512 GPUs (FSDP 8, TP 8, PP8). Local batch size 32, global batch size 256. Full activation checkpointing.

| Schedule | TPS/GPU | Memory(GiB) |
| ----- | ----: | ----: |
| Interleaved 1F1B | 128 | 72.7 |
"""


def test_a_caption_and_its_rows_give_degrees_sequence_schedule_and_techniques():
    cp, pp = rows_2024(TABLES_2024, "x.md")
    assert (cp.table, cp.label, cp.tps_per_gpu, cp.memory_gib) == ("Table 2", "FSDP 4, CP 2", 2540.0, 84.2)
    assert dataclasses.asdict(cp.recipe) == dict(
        flavor="8B", gpus=8, hardware="h100-sxm-96gb-500w", local_batch=1, seq=65536, ac="full", compile=True,
        float8="tensorwise", async_tp=False, dp_shard=4, tp=1, pp=1, cp=2, pp_schedule=None, float8_options=())
    r = pp.recipe
    assert (r.flavor, r.gpus, r.dp_shard, r.tp, r.pp, r.cp, r.pp_schedule, r.local_batch, r.seq, r.async_tp) == \
        ("405B", 512, 8, 8, 8, 1, "Interleaved1F1B", 32, titan_rows.DEFAULT_SEQ, True)
    # TPS/GPU is per GPU of a TP x PP group sharing the samples: 32 x 8192 / 64 tokens a step, at 128 / s
    assert pp.step_ms == pytest.approx(32 * 8192 / 64 / 128 * 1e3)


def test_degrees_that_do_not_make_the_gpu_count_are_refused_naming_the_table():
    with pytest.raises(RowsError, match="x.md: Table 2 'FSDP 4, CP 4'.*not the 8 GPUs"):
        rows_2024(TABLES_2024.replace("FSDP 4, CP 2", "FSDP 4, CP 4"), "x.md")


def test_an_async_tp_table_line_gives_a_vanilla_and_an_async_row():
    text = HARDWARE_H100 + """
#### Llama3 8b on 64 H100s with FSDP=8, TP=8, torch.compile, per op SAC, local batch size 12

| Quantization      | Vanilla TP tokens/sec | Async TP tokens/sec |  Async TP speedup
| :---------------- | :----- | :----- | :--- |
| float8 rowwise    | 3708.5 | 3914.9 | 1.06 |
"""
    vanilla, fused = rows_async_tp(text, "a.md")
    assert (vanilla.tps_per_gpu, fused.tps_per_gpu, vanilla.memory_gib) == (3708.5, 3914.9, None)
    assert (vanilla.recipe.async_tp, fused.recipe.async_tp) == (False, True)
    r = fused.recipe
    assert (r.flavor, r.gpus, r.dp_shard, r.tp, r.ac, r.compile, r.float8, r.local_batch) == \
        ("8B", 64, 8, 8, "selective", True, "rowwise", 12)


def test_the_h200_command_gives_flags_and_what_0_3_cannot_express_is_noted():
    text = """### Hardware
- 8 NVIDIA H200 GPUs connected via NVLink.
```
  torchrun \\
    --nproc_per_node 8 \\
    torchtitan/train.py \\
    --job.config-file torchtitan/models/llama3/train_configs/llama3_8b.toml \\
    --training.local_batch_size=2 \\
    --training.compile \\
    --model.converters="quantize.linear.float8" \\
    --quantize.linear.float8.enable_fsdp_float8_all_gather \\
    --profiler.profile_freq 1000000
```
| NUM_NODES | TPS/GPU | Memory(GiB) |
| ----- | ----: | ----: |
| 4 | 10938 | 47.96 |
"""
    (row,) = rows_h200(text, "h.md")
    r = row.recipe
    assert (r.hardware, r.gpus, r.dp_shard, r.local_batch, r.compile, r.float8, r.ac) == \
        ("h200", 32, 32, 2, True, "tensorwise", "selective")
    assert (row.tps_per_gpu, row.memory_gib) == (10938.0, 47.96)
    assert r.float8_options == ("enable_fsdp_float8_all_gather",)


def test_a_rows_key_changes_with_its_recipe():
    (cp, pp) = rows_2024(TABLES_2024, "x.md")
    assert cp.key() != dataclasses.replace(cp, recipe=dataclasses.replace(cp.recipe, seq=32768)).key()
    assert cp.key() == rows_2024(TABLES_2024, "x.md")[0].key()


@pytest.mark.shared_data
def test_every_published_row_of_the_three_files(shared_data: Path):
    rows, missing = published_rows(shared_data)
    assert missing == []
    assert len(rows) == 32
    by_source = {s: [r for r in rows if r.source == s] for s in titan_rows.FILES}
    assert [len(by_source[s]) for s in titan_rows.FILES] == [18, 12, 2]
    assert {r.recipe.hardware for r in rows} == {"h100-sxm-96gb-500w", "h200"}
    assert all(r.recipe.dp_shard * r.recipe.tp * r.recipe.pp * r.recipe.cp == r.recipe.gpus for r in rows)
    cp8 = next(r for r in rows if r.table == "Table 6" and r.label == "FSDP 1, CP 8")
    assert (cp8.recipe.seq, cp8.recipe.cp, cp8.recipe.pp, cp8.recipe.pp_schedule, cp8.tps_per_gpu) == \
        (262144, 8, 8, "1F1B", 16.0)
    schedules = {r.recipe.pp_schedule for r in rows if r.table == "Table 5"}
    assert schedules == {"1F1B", "Interleaved1F1B"}
    assert sum(r.recipe.async_tp for r in rows) == 6 + 1 + 2 + 4     # async TP file, Table 4, Tables 5 and 6
    assert {r.recipe.float8 for r in rows} == {None, "tensorwise", "rowwise"}
    assert all(r.memory_gib is None for r in by_source[titan_rows.FILES[1]])


def test_rows_are_chosen_by_their_whole_name_before_the_comma_separated_parts_of_it():
    (cp, pp) = rows_2024(TABLES_2024, "x.md")
    named = dataclasses.replace(cp, table="async TP 8B", label="vanilla TP, float8 rowwise")
    other = dataclasses.replace(pp, table="async TP 8B", label="async TP, float8 rowwise")
    rows = [named, other]
    assert "," in named.name and titan_rows.chosen(rows, named.name) == [named]
    assert titan_rows.chosen(rows, "vanilla TP, async TP") == rows   # parts: each row holds one of them
    assert titan_rows.chosen(rows, None) == rows and titan_rows.chosen(rows, "no such row") == []
