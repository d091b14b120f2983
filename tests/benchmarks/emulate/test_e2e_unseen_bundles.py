"""The bundles of the end-to-end benchmark's --unseen: one per GPU, trained without it, whole or not at all."""
from __future__ import annotations

import subprocess

import pytest

from benchmarks.emulate.e2e import unseen_bundles
from benchmarks.emulate.e2e.unseen_bundles import (
    training_digest as real_training_digest,  # before the fixture replaces it
)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(unseen_bundles, "cache_root", lambda: tmp_path)
    monkeypatch.setattr(unseen_bundles, "training_digest", lambda: "0123456789abcdef")


def test_a_failed_training_says_so_in_one_line_and_leaves_no_bundle(monkeypatch):
    calls = []

    def failing(command, **kwargs):
        calls.append(command)
        return subprocess.CompletedProcess(command, 1, "", "noise\nstepcast: data.path: no rows\n")

    monkeypatch.setattr(unseen_bundles.subprocess, "run", failing)
    with pytest.raises(RuntimeError, match=r"without t4 failed: stepcast: data.path: no rows$"):
        unseen_bundles.held_out_bundle("t4")
    assert "data.exclude_hardware=[t4]" in calls[0] and "splits=[]" in calls[0]
    assert not any(c.startswith("routes_from=") for c in calls[0])
    assert not unseen_bundles.bundle_dir("t4").exists()
    with pytest.raises(RuntimeError):
        unseen_bundles.held_out_bundle("t4", routed=True)
    assert f"routes_from={unseen_bundles.ROUTES}" in calls[1]
    assert unseen_bundles.bundle_dir("t4", routed=True) != unseen_bundles.bundle_dir("t4")


def test_a_trained_bundle_is_reused_and_named_with_the_held_out_gpu(monkeypatch):
    done = unseen_bundles.bundle_dir("p4")
    done.mkdir(parents=True)
    (done / "manifest.json").write_text("{}")
    monkeypatch.setattr(unseen_bundles.subprocess, "run", lambda *a, **k: pytest.fail("trained again"))
    env = unseen_bundles.unseen_env("p4", "bert_large")
    assert env == {"STEPCAST_ESTIMATOR": str(done), "STEPCAST_INSTEP_EXCLUDE": "bert_large,p4"}



def test_the_bundles_key_follows_what_training_reads_not_every_commit(tmp_path, monkeypatch):
    real = real_training_digest
    monkeypatch.setattr(unseen_bundles, "REPO_ROOT", tmp_path)

    def commit(path: str, text: str) -> str:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
        for command in (["add", "-A"], ["commit", "-qm", path]):
            subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *command], cwd=tmp_path, check=True)
        return real()

    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    for tree in unseen_bundles.TRAINING_TREES:
        commit(f"{tree}/a.txt", "1")
    first = real()
    commit("emulate/b.txt", "emulation only")
    assert real() == first
    commit("estimator/a.txt", "2")
    assert real() != first
