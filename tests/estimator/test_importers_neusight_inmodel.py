"""NeuSight's in-model per-operator traces as in-step rows: node -> kernel row mapping and each label's pass scale."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from stepcast.estimator.importers import neusight_inmodel as inmodel

BERT_V100 = "Tesla_V100-PCIE-32GB/bert_large-train-512-2"


@pytest.fixture(scope="module")
def rows(shared_data: Path) -> pd.DataFrame:
    return inmodel.load(shared_data)


def test_every_traced_label_gives_rows_of_the_three_families(rows, shared_data):
    labels = inmodel.label_paths(shared_data)
    assert len(labels) == rows["sample"].nunique() == 34
    assert set(rows["family"]) == {"gemm", "norm", "elementwise"}
    assert (rows["source"] == "neusight_inmodel").all() and (rows["dtype"] == "fp32").all()
    assert set(rows["group"]) == {f"neusight_inmodel/{m}" for m in rows["model"].unique()}


def test_bert_linear_and_attention_matmul_shapes(rows):
    bert = rows[rows["sample"] == BERT_V100]
    linears = bert[bert["aten_op"] == "Linear"]
    # batch 2 x 512 tokens; query/key/value/output 1024 -> 1024, intermediate 1024 -> 4096, output 4096 -> 1024
    assert {(r.m, r.n, r.k) for r in linears.itertuples() if r.repeat == 24} == {
        (1024, 1024, 1024), (1024, 4096, 1024), (1024, 1024, 4096)}
    scores = bert[(bert["aten_op"] == "matmul")].sort_values("k")
    # Q @ K^T: [2, 16, 512, 64] @ [2, 16, 64, 512]; P @ V: [2, 16, 512, 512] @ [2, 16, 512, 64]
    assert [(r.m, r.n, r.k, r.batch) for r in scores.itertuples()] == [(512, 512, 64, 32), (512, 64, 512, 32)]


def test_runtime_is_the_forward_time_and_pass_scale_matches_the_label(rows, shared_data):
    path = shared_data / inmodel.LABEL_DIR / f"{BERT_V100}.json"
    trace = pd.read_csv(path.with_suffix(".csv"))
    query = trace[trace["target"] == "bert.encoder.layer.0.attention.self.query"].iloc[0]
    bert = rows[rows["sample"] == BERT_V100]
    first = bert[bert["aten_op"] == "Linear"].iloc[0]
    assert first["runtime_us"] == pytest.approx(query["fw_latency"] * 1000.0)
    label = json.loads(path.read_text())
    # pass_scale = measured forward / the trace's kernel-launching nodes (layer rows x num_layer)
    kernel_ms = label["fw_latency"] / bert["pass_scale"].iloc[0]
    assert kernel_ms > sum(bert["runtime_us"] * bert["repeat"]) / 1000.0  # rows are a subset of the nodes
    assert 0.5 < bert["pass_scale"].iloc[0] < 1.0  # this trace sums above its own pass (one sync per node)


@pytest.mark.parametrize("node, expected", [
    (("call_function", "<built-in method addmm of type object at 0x1>", "Conv1D", [[3840], [1024, 1280],
                                                                                   [1280, 3840]], [1024, 3840]),
     {"family": "gemm", "m": 1024, "n": 3840, "k": 1280, "batch": 1}),
    (("call_module", "h.0.ln_1", "LayerNorm", [[1, 1024, 1280]], [1, 1024, 1280]),
     {"family": "norm", "op": "layer_norm", "rows": 1024, "cols": 1280, "pass": "fwd"}),
    (("call_function", "<built-in function truediv>", "", [[1, 20, 1024, 1024], [1]], [1, 20, 1024, 1024]),
     {"family": "elementwise", "op": "div_scalar", "numel": 20 * 1024 * 1024}),
    (("call_function", "<built-in function add>", "", [[2, 512, 1024], [2, 512, 1024]], [2, 512, 1024]),
     {"family": "elementwise", "op": "add", "numel": 2 * 512 * 1024}),
    # BERT's attention mask broadcast over the heads and queries: the two-operand kind, as the capture names it
    (("call_function", "<built-in function add>", "", [[2, 16, 512, 512], [2, 1, 1, 512]], [2, 16, 512, 512]),
     {"family": "elementwise", "op": "add", "numel": 2 * 16 * 512 * 512}),
])
def test_node_spec(node, expected):
    assert inmodel.node_spec(*node, training=False) == expected


def test_dropout_launches_a_kernel_only_in_training_labels():
    node = ("call_module", "drop", "Dropout", [[2, 512, 1024]], [2, 512, 1024])
    assert inmodel.node_spec(*node, training=False) is None
    assert inmodel.node_spec(*node, training=True)["op"] == "dropout"
