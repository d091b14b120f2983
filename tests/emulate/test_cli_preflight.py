"""``stepcast run``'s checks before it builds anything (emulate.cli.check_run): good options pass, parsed to the
values the run uses (the variables' where an option is not given), and the checks create no folder."""
from __future__ import annotations

import argparse
from pathlib import Path

from stepcast.emulate.cli import add_run_parser, check_run


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_run_parser(parser.add_subparsers())
    return parser.parse_args(["run", *argv])


def test_good_options_pass_and_are_parsed(tmp_path, monkeypatch):
    monkeypatch.setenv("STEPCAST_CACHE_DIR", str(tmp_path / "cache"))
    script = tmp_path / "s.py"
    script.write_text("")
    ns = parse("--hardware", "a100-sxm-80gb", "--nproc", "4", "--nodes", "2", "--host-speed", "1.5",
               "--launch-queue", "64", "--run-ranks", "0-3", "--trace-ranks", "0,5-6", "--report", str(tmp_path / "r.json"),
               "--trace-dir", str(tmp_path / "traces"), "--", str(script))
    spec, probe = check_run(ns)
    assert spec.id == "a100-sxm-80gb" and probe is None
    assert (ns.nproc, ns.nodes, ns.host_speed, ns.launch_queue, ns.run_rank_list) == (4, 2, 1.5, 64, [0, 1, 2, 3])
    assert ns.trace_rank_list == [0, 5, 6]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.py"]


def test_options_not_given_take_the_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("STEPCAST_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("STEPCAST_HOST_SPEED", "2")
    monkeypatch.delenv("STEPCAST_LAUNCH_QUEUE_DEPTH", raising=False)
    ns = parse("--", __file__)
    spec, _ = check_run(ns)
    assert spec.id == "h100-sxm" and (ns.host_speed, ns.launch_queue, ns.nproc) == (2.0, 1024, 1)


def test_every_problem_is_reported_at_once(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("STEPCAST_CACHE_DIR", str(tmp_path / "cache"))
    ns = parse("--host-speed", "0", "--launch-queue", "x", "--report", str(tmp_path), "--trace-ranks", "0,9",
               "--", str(tmp_path / "no.py"))
    assert check_run(ns) == (None, None)
    assert [line.split(":")[1].strip() for line in capsys.readouterr().err.splitlines()] == [
        f"script {Path(tmp_path / 'no.py')} not found", "--host-speed", "--launch-queue", "--report",
        "--trace-ranks '0,9'"]


def test_a_moe_routing_is_checked_before_the_run_and_its_histogram_read(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("STEPCAST_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("STEPCAST_MOE_ROUTING", raising=False)
    ns = parse("--moe-routing", "power:1.2", "--", __file__)
    assert check_run(ns)[0] is not None and ns.moe_routing == "power:1.2"
    ns = parse("--", __file__)
    assert check_run(ns)[0] is not None and ns.moe_routing is None  # not stated: balanced, and the report says so
    bad = tmp_path / "hist.json"
    bad.write_text('{"tokens_per_expert": "many"}')
    for routing, expected in (("skewed", "--moe-routing: expected balanced, power:ALPHA (ALPHA > 0)"),
                              (f"histogram:{bad}", "--moe-routing: expected")):
        ns = parse("--moe-routing", routing, "--", __file__)
        assert check_run(ns)[0] is None
        assert expected in capsys.readouterr().err


def test_a_skewed_routing_is_refused_for_a_sparse_run_whose_copies_would_do_the_same_work(tmp_path, monkeypatch,
                                                                                           capsys):
    monkeypatch.setenv("STEPCAST_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("STEPCAST_MOE_ROUTING", raising=False)
    sparse = ("--nproc", "4", "--nodes", "2", "--run-ranks", "0")
    assert check_run(parse(*sparse, "--moe-routing", "balanced", "--", __file__))[0] is not None
    assert check_run(parse(*sparse, "--moe-routing", "power:1.2", "--", __file__))[0] is None
    assert "a skewed routing gives expert-parallel ranks different work" in capsys.readouterr().err
    assert check_run(parse("--nproc", "4", "--moe-routing", "power:1.2", "--", __file__))[0] is not None
