"""The end-to-end benchmark's parsers (NeuSight labels and per-op traces, torchtitan tables), its reading of the
emulator's output (passes, per-iteration kernel time) and one label run end to end."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.emulate.e2e import labelled, neusight, nosync, torchtitan
from stepcast.emulate.emulation import OTHER, failure_line, iteration_family_ms
from stepcast.profiling.paths import shared_data_root

V100 = "neusight/scripts/asplos/label/Tesla_V100-PCIE-32GB"


def write_label(folder: Path, name: str, **fields) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(fields))
    return path


def test_label_name_and_fields_are_parsed(tmp_path: Path):
    path = write_label(tmp_path / "label" / "Tesla_T4", "gpt2_large-train-1024-4.json", num_layer=36,
                       e2e_latency=30.0, fw_latency=10.0, bwall_latency=20.0)
    label = neusight.parse_label(path)
    assert (label.hardware, label.model, label.mode, label.seq, label.batch) == ("t4", "gpt2_large", "train", 1024, 4)
    assert (label.forward_ms, label.backward_ms, label.total_ms, label.num_layer) == (10.0, 20.0, 30.0, 36)


@pytest.mark.parametrize("name, fields, message", [
    ("bert_large-inf-512-8.json", {"num_layer": 24, "e2e_latency": 1.0, "fw_latency": 1.0}, "bwall_latency"),
    ("bert_large-512-8.json", {}, "expected a name"),
])
def test_malformed_label_names_the_file_and_field(tmp_path: Path, name: str, fields: dict, message: str):
    path = write_label(tmp_path / "label" / "Tesla_T4", name, **fields)
    with pytest.raises(neusight.LabelFormatError, match=message) as err:
        neusight.parse_label(path)
    assert str(path) in str(err.value)


def test_unknown_gpu_folder_is_rejected(tmp_path: Path):
    path = write_label(tmp_path / "label" / "Imaginary_GPU", "bert_large-inf-512-8.json", num_layer=24,
                       e2e_latency=1.0, fw_latency=1.0, bwall_latency=0.0)
    with pytest.raises(neusight.LabelFormatError, match="Imaginary_GPU"):
        neusight.parse_label(path)


@pytest.mark.parametrize("op, target, module, shapes, out, family", [
    ("call_module", "", "Linear", [[2, 512, 1024]], "(2, 512, 1024)", "gemm"),
    ("call_module", "", "Conv1D", [[2, 512, 1024]], "(2, 512, 1024)", "gemm"),
    ("call_module", "", "LayerNorm", [[2, 512, 1024]], "(2, 512, 1024)", "norm"),
    ("call_module", "", "Embedding", [[2, 512]], "(2, 512, 1024)", OTHER),
    ("call_module", "", "Dropout", [[2, 512, 1024]], "(2, 512, 1024)", "elementwise"),
    ("call_function", "<built-in method matmul of type object at 0x1>", "", [[2, 16, 512, 64]], "(2,)", "gemm"),
    ("call_function", "<function softmax at 0x1>", "", [[2, 16, 512, 512]], "(2, 16, 512, 512)", "norm"),
    ("call_function", "<built-in function add>", "", [[2, 512, 1024], [2, 512, 1024]], "(2, 512, 1024)",
     "elementwise"),
    ("call_function", "<built-in function add>", "", [[1]], "(1,)", neusight.HOST),
    ("call_method", "view", "", [[2, 512, 1024], [1]], "(2, 512, 16, 64)", neusight.HOST),
    ("placeholder", "input_ids", "", [], "(2, 512)", neusight.HOST),
])
def test_fx_nodes_map_to_kernel_families(op, target, module, shapes, out, family):
    assert neusight.node_family(op, target, module, shapes, out) == family


def test_csv_layer_rows_are_scaled_by_the_layer_count(tmp_path: Path):
    folder = tmp_path / "label" / "Tesla_T4"
    path = write_label(folder, "bert_large-train-512-2.json", num_layer=24, e2e_latency=3.0, fw_latency=1.0,
                       bwall_latency=2.0)
    layer = "{'nn_module_stack': OrderedDict([('bert.encoder.layer.0', <class 'x.BertLayer'>), " \
            "('bert.encoder.layer.0.output.dense', <class 'torch.nn.modules.linear.Linear'>)])}"
    head = "{'nn_module_stack': OrderedDict([('cls.predictions.decoder', <class 'torch.nn.modules.linear.Linear'>)])}"
    rows = [("call_module", "a", layer, 1.0, 2.0, 0.5), ("call_module", "b", head, 3.0, 4.0, 0.0)]
    lines = ["op,target,meta,input_shapes,output_shape,fw_latency,bw_latency,acc_latency"]
    lines += [f'{op},{t},"{meta}","[[2, 512, 1024]]","(2, 512, 1024)",{fw},{bw},{acc}'
              for op, t, meta, fw, bw, acc in rows]
    path.with_suffix(".csv").write_text("\n".join(lines) + "\n")
    families = neusight.csv_family_ms(neusight.parse_label(path))
    assert families["forward"]["gemm"] == pytest.approx(24 * 1.0 + 3.0)
    assert families["backward"]["gemm"] == pytest.approx(24 * 2.5 + 4.0)  # backward includes accumulation


def test_kernel_time_is_bucketed_by_the_iteration_that_launched_it():
    trace = {"events": [
        {"seq": 0, "kind": "iteration"}, {"seq": 1, "kind": "kernel", "spec": {"family": "gemm"}},
        {"seq": 2, "kind": "iteration"}, {"seq": 3, "kind": "kernel", "spec": None},
        {"seq": 4, "kind": "kernel", "spec": {"family": "gemm"}}, {"seq": 5, "kind": "memcpy"},
    ]}
    timeline = {"traceEvents": [
        {"ph": "X", "pid": 0, "cat": "kernel", "ts": 50.0, "dur": 1000.0, "args": {"seq": 1}},
        # launched in iteration 1 but running after iteration 1's host span: still iteration 1's work
        {"ph": "X", "pid": 0, "cat": "kernel", "ts": 9000.0, "dur": 500.0, "args": {"seq": 3}},
        {"ph": "X", "pid": 0, "cat": "kernel", "ts": 9500.0, "dur": 2000.0, "args": {"seq": 4}},
        {"ph": "X", "pid": 0, "cat": "memcpy", "ts": 9500.0, "dur": 250.0, "args": {"seq": 5}},
        {"ph": "X", "pid": 1, "cat": "kernel", "ts": 0.0, "dur": 7000.0, "args": {"seq": 1}},  # another rank
        {"ph": "X", "pid": 0, "cat": "iteration", "ts": 0.0, "dur": 10.0},
    ]}
    assert iteration_family_ms(trace, timeline) == [{"gemm": 1.0}, {OTHER: 0.75, "gemm": 2.0}]


def test_a_failed_run_is_summarised_by_its_exception_line():
    stderr = ("Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\n"
              "torch.AcceleratorError: CUDA error: error reported by the stepcast virtual device\n"
              "Search for `cudaErrorUnknown' in https://docs.nvidia.com/cuda/ for more information.\n\n"
              "stepcast: the script failed on rank(s) [0]: traces up to the failure are in /tmp/t\n")
    assert failure_line(stderr) == "torch.AcceleratorError: CUDA error: error reported by the stepcast virtual device"
    assert failure_line("stepcast: script x.py not found\n") == "stepcast: script x.py not found"


def test_passes_are_read_from_the_last_repetition():
    layout = labelled.phases()["train"]
    assert layout == ("forward", "loss", "backward", "setup")
    # set-up, then two repetitions of forward | loss | backward | setup
    iterations = [100.0, 11.0, 1.0, 22.0, 0.1, 10.0, 1.5, 20.0, 0.2]
    families = [{"gemm": float(i)} for i in range(len(iterations))]
    passes = labelled.read_passes({"report": {"iterations_ms": iterations}, "iterations": families}, "train", reps=2)
    assert (passes["forward_ms"], passes["backward_ms"], passes["total_ms"]) == (10.0, 20.0, 30.0)
    assert passes["families"] == {"forward": {"gemm": 5.0}, "backward": {"gemm": 7.0}}
    with pytest.raises(ValueError, match="expected 9"):
        labelled.read_passes({"report": {"iterations_ms": iterations[:5]}, "iterations": families}, "train", reps=2)


def test_markdown_tables_are_read_under_their_captions():
    text = ("intro\n\n**Table 1** 1D Parallelism (FSDP). Llama 3.1 8B model. 8 GPUs. Local batch size 2.\n\n"
            "| Techniques | TPS/GPU | Memory(GiB) |\n| ----- | ----: | ----: |\n| FSDP | 5,762 | 82.4 |\n"
            "| FSDP + torch.compile | 6,667 | 77.0 |\n\n**Table 2** other\n\n| a | b |\n| - | - |\n| 1 | 2 |\n")
    tables = torchtitan.parse_tables(text)
    assert tables[1][1] == [{"Techniques": "FSDP", "TPS/GPU": "5,762", "Memory(GiB)": "82.4"},
                            {"Techniques": "FSDP + torch.compile", "TPS/GPU": "6,667", "Memory(GiB)": "77.0"}]
    assert tables[2][1] == [{"a": "1", "b": "2"}]


@pytest.fixture(scope="module")
def shared_data() -> Path:
    root = shared_data_root()
    if not (root / V100).is_dir():
        pytest.skip(f"shared data not found at {root} (set STEPCAST_SHARED_DATA)")
    return root


@pytest.mark.shared_data
def test_real_labels_are_parsed_as_written(shared_data: Path):
    path = shared_data / V100 / "bert_large-train-512-2.json"
    raw = json.loads(path.read_text())
    label = neusight.parse_label(path)
    assert (label.hardware, label.mode, label.seq, label.batch) == ("v100-pcie-32gb", "train", 512, 2)
    assert (label.forward_ms, label.backward_ms, label.total_ms) == (raw["fw_latency"], raw["bwall_latency"],
                                                                      raw["e2e_latency"])
    labels, skipped = neusight.discover(shared_data)
    assert len(labels) == 34 and all(lb.config.is_file() and lb.csv.is_file() for lb in labels)
    assert {why for _, why in skipped} == {neusight.SKIP_FUSION, neusight.SKIP_MOE}


@pytest.mark.shared_data
@pytest.mark.slow
def test_one_label_end_to_end(shared_data: Path, tmp_path: Path, monkeypatch):
    """BERT-large inference (batch 8 x 512) on a virtual T4, through the CLI: a row with the label's numbers."""
    pytest.importorskip("transformers", reason="pip install -e '.[bench]'")
    from benchmarks.emulate.e2e.__main__ import neusight_row

    monkeypatch.setenv("STEPCAST_CACHE_DIR", str(tmp_path / "cache"))
    label = neusight.parse_label(shared_data / "neusight/scripts/asplos/label/Tesla_T4/bert_large-inf-512-8.json")
    row = neusight_row(label, fresh=True)
    assert row["ok"], row.get("error")
    assert row["measured"]["total_ms"] == label.total_ms
    # the forward pass is GEMM-bound: hundreds of ms of fp32 GEMMs on a T4, whatever the estimator's error
    assert row["families"]["forward"]["gemm"] > 0.5 * row["forward_ms"] > 100.0
    assert row["total_error"] == pytest.approx((row["total_ms"] - label.total_ms) / label.total_ms * 100)
    assert list((tmp_path / "cache" / "e2e").glob("*/*.json")), "the row was not cached"


@pytest.mark.shared_data
@pytest.mark.slow
def test_no_sync_iteration_covers_its_device_time(shared_data: Path, tmp_path: Path, monkeypatch):
    """GPT-2 large, no synchronisation: the host runs ahead, so an iteration lasts at least its kernels."""
    pytest.importorskip("transformers", reason="pip install -e '.[bench]'")
    monkeypatch.setenv("STEPCAST_CACHE_DIR", str(tmp_path / "cache"))
    row = nosync.check(fresh=True)
    assert row["ok"], row.get("error")
    assert row["device_ms"] > 100.0
    assert row["iteration_ms"] >= row["device_ms"] * (1 - nosync.TOLERANCE)


def test_quick_keeps_the_smallest_bert_large_batch_per_gpu_and_mode(tmp_path: Path):
    def label(gpu: str, name: str) -> neusight.Label:
        return neusight.parse_label(write_label(tmp_path / "label" / gpu, name, num_layer=24, e2e_latency=1.0,
                                                fw_latency=1.0, bwall_latency=0.0))

    v100 = "Tesla_V100-PCIE-32GB"
    labels = [label("Tesla_T4", "bert_large-inf-512-16.json"), label("Tesla_T4", "bert_large-inf-512-8.json"),
              label("Tesla_T4", "gpt2_large-inf-1024-4.json"), label(v100, "bert_large-inf-512-8.json"),
              label(v100, "bert_large-train-512-2.json")]
    from benchmarks.emulate.e2e.__main__ import select_labels

    quick = select_labels(labels, gpus=None, models=None, quick=True)
    assert [(lb.hardware, lb.path.stem) for lb in quick] == [
        ("t4", "bert_large-inf-512-8"), ("v100-pcie-32gb", "bert_large-inf-512-8"),
        ("v100-pcie-32gb", "bert_large-train-512-2")]
    assert [lb.path.stem for lb in select_labels(labels, ["v100"], ["bert_large"], quick=False)] == [
        "bert_large-inf-512-8", "bert_large-train-512-2"]


def test_in_step_family_time_scales_each_pass_to_its_measurement():
    from benchmarks.emulate.e2e.__main__ import in_step_family_ms

    row = {"measured": {"forward_ms": 60.0, "backward_ms": 100.0},
           "csv_families": {"forward": {"gemm": 50.0, "norm": 25.0, neusight.HOST: 30.0},
                            "backward": {"gemm": 200.0}}}
    # forward: 75 ms of kernel nodes -> 60 measured (host nodes do not count); backward: 200 -> 100
    assert in_step_family_ms(row) == pytest.approx({"gemm": 40.0 + 100.0, "norm": 20.0})


def test_each_label_is_emulated_with_its_own_model_held_out(monkeypatch, tmp_path):
    from benchmarks.emulate.e2e import __main__ as e2e_benchmark

    seen = {}

    def fake_emulate(script, args, hardware, env=None, **_):
        seen.update(env=env, hardware=hardware)
        return {"ok": False, "error": "stop here", "command": "", "wall_s": 0.0}

    monkeypatch.setattr(e2e_benchmark, "emulate_script", fake_emulate)
    monkeypatch.setattr(e2e_benchmark, "cached", lambda key, compute, fresh: compute())
    path = write_label(tmp_path / "label" / "Tesla_T4", "gpt2_large-inf-1024-4.json", num_layer=36,
                       e2e_latency=10.0, fw_latency=10.0, bwall_latency=0.0)
    row = e2e_benchmark.neusight_row(neusight.parse_label(path), fresh=True)
    assert seen["env"]["STEPCAST_INSTEP_EXCLUDE"] == "gpt2_large" and seen["hardware"] == "t4"
    assert row["held_out"] == "gpt2_large"


def test_a_gpu_the_installed_torch_cannot_run_is_emulated_with_the_older_torch(monkeypatch, tmp_path):
    """NeuSight's P100: torch's CUDA 13 wheels carry no sm_60 code, so the label runs under the older release's
    interpreter (a throwaway environment), and its cached row is keyed by that torch."""
    from benchmarks.emulate import torch_venv
    from benchmarks.emulate.e2e import __main__ as e2e_benchmark
    from stepcast.emulate import launcher

    seen = {}

    def fake_emulate(script, args, hardware, env=None, python=None, **_):
        seen.update(python=python, hardware=hardware)
        return {"ok": False, "error": "stop here", "command": "", "wall_s": 0.0}

    made = []

    class FakeInstaller:
        def ensure(self, version):
            made.append(version)
            return torch_venv.Venv(version=version, path=tmp_path / f"torch-{version}", torch=f"{version}+cu126")

    monkeypatch.setattr(e2e_benchmark, "emulate_script", fake_emulate)
    monkeypatch.setattr(e2e_benchmark, "cached", lambda key, compute, fresh: {**compute(), "key": key})
    monkeypatch.setattr(launcher, "torch_arch_flags", lambda: ["sm_75", "sm_80", "sm_90"])
    monkeypatch.setattr(torch_venv, "Installer", FakeInstaller)
    torch_for = e2e_benchmark.interpreters("2.7.1")
    p100 = write_label(tmp_path / "label" / "Tesla_P100-PCIE-16GB", "bert_large-inf-512-8.json", num_layer=24,
                       e2e_latency=10.0, fw_latency=10.0, bwall_latency=0.0)
    row = e2e_benchmark.neusight_row(neusight.parse_label(p100), fresh=True, torch_for=torch_for)
    assert seen["python"] == str(tmp_path / "torch-2.7.1" / "bin" / "python") and made == ["2.7.1"]
    assert row["torch"] == "2.7.1+cu126" and row["key"].endswith("-torch2.7.1+cu126")
    t4 = write_label(tmp_path / "label" / "Tesla_T4", "bert_large-inf-512-8.json", num_layer=24,
                     e2e_latency=10.0, fw_latency=10.0, bwall_latency=0.0)
    e2e_benchmark.neusight_row(neusight.parse_label(t4), fresh=True, torch_for=torch_for)
    assert seen["python"] is None and made == ["2.7.1"]  # the T4 (sm_75) runs on the installed torch


def test_a_generated_page_names_its_command_without_this_machines_data_folder():
    from benchmarks.emulate.e2e.__main__ import page_command

    assert page_command(["--sources", "torchtitan", "--root", "/data/x", "--rows", "Table 1,H200", "--root=/y"]) == \
        "python -m benchmarks.emulate.e2e --sources torchtitan --rows 'Table 1,H200'"
