"""The bundles of the end-to-end benchmark's --unseen: one per GPU, trained without it, whole or not at all."""
from __future__ import annotations

import subprocess

import pytest

from emulate.e2e import unseen_bundles


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(unseen_bundles, "cache_root", lambda: tmp_path)
    monkeypatch.setattr(unseen_bundles, "git_head", lambda: "0123456789abcdef")


def test_a_failed_training_says_so_in_one_line_and_leaves_no_bundle(monkeypatch):
    calls = []

    def failing(command, **kwargs):
        calls.append(command)
        return subprocess.CompletedProcess(command, 1, "", "noise\nstepcast: data.path: no rows\n")

    monkeypatch.setattr(unseen_bundles.subprocess, "run", failing)
    with pytest.raises(RuntimeError, match=r"without t4 failed: stepcast: data.path: no rows$"):
        unseen_bundles.held_out_bundle("t4")
    assert "data.exclude_hardware=[t4]" in calls[0] and "splits=[]" in calls[0]
    assert not unseen_bundles.bundle_dir("t4").exists()


def test_a_trained_bundle_is_reused_and_named_with_the_held_out_gpu(monkeypatch):
    done = unseen_bundles.bundle_dir("p4")
    done.mkdir(parents=True)
    (done / "manifest.json").write_text("{}")
    monkeypatch.setattr(unseen_bundles.subprocess, "run", lambda *a, **k: pytest.fail("trained again"))
    env = unseen_bundles.unseen_env("p4", "bert_large")
    assert env == {"STEPCAST_ESTIMATOR": str(done), "STEPCAST_INSTEP_EXCLUDE": "bert_large,p4"}
