"""The README's "what you will see" block is what the README's first command prints (tools/readme_sample.py makes
it; machine-dependent values read <varies>), and the README's first command is the one that block shows."""
from __future__ import annotations

import pytest

from stepcast.profiling.paths import REPO_ROOT
from tests.tools import load_tool

readme_sample = load_tool("readme_sample")


def summary(iterations: str, mfu: str) -> str:
    """A summary as stepcast run prints it (rich sizes the value column to its longest value)."""
    rows = [("world size (ranks simulated)", "1 (1)"), ("iterations", iterations), ("peak memory", "1.58 GiB"),
            ("  host bound", "0.738 ms"), ("MFU", mfu)]
    width = max(len(v) for _, v in rows)
    body = [f"│ {label.ljust(28)} │ {value.rjust(width)} │" for label, value in rows]
    return "\n".join(["      Predicted iteration", f"┌{'─' * 30}┬{'─' * (width + 2)}┐", *body,
                      f"└{'─' * 30}┴{'─' * (width + 2)}┘", "step 5: loss 0.0000"])


def test_mask_hides_only_machine_dependent_rows_and_keeps_the_table_whole():
    masked = readme_sample.mask(summary("1031.24, 8.47, 7.17, 7.17 ms", "18.5%")).splitlines()
    table = masked[1:8]
    assert len({len(line) for line in table}) == 1, "\n".join(masked)
    values = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in table[1:-1]}
    # host time is counted work (emulate/sim/host.py): only the list of every iteration, warm-up included, varies
    assert values == {"world size (ranks simulated)": "1 (1)", "iterations": "<varies>", "peak memory": "1.58 GiB",
                      "host bound": "0.738 ms", "MFU": "18.5%"}
    assert masked[-1] == "step 5: loss 0.0000"


def test_mask_gives_the_same_block_whatever_the_varying_values():
    assert readme_sample.mask(summary("1031.24, 8.47, 7.17, 7.17 ms", "18.5%")) == \
        readme_sample.mask(summary("998.10, 12.03, 7.17, 7.17 ms", "18.5%"))


def test_mask_keeps_what_a_run_determines():
    assert readme_sample.mask(summary("1031.24, 8.47, 7.17, 7.17 ms", "18.5%")) != \
        readme_sample.mask(summary("1031.24, 8.47, 7.17, 7.17 ms", "9.1%"))


def ci_summary(iteration: str, host_bound: str, mfu: str, steady: str) -> str:
    """A summary as stepcast run prints it at COLUMNS=100 (a long value wraps onto a row with no label)."""
    rows = [("iteration time", iteration), ("  compute", "6.574 ms"), ("  host bound", host_bound), ("MFU", mfu),
            ("steady iterations (spread)", steady)]
    width = 45
    body = []
    for label, value in rows:
        while len(value) > width:
            cut = value.rindex(" ", 0, width)
            body.append(f"│ {label.ljust(28)} │ {value[:cut].rjust(width)} │")
            label, value = "", value[cut + 1:]
        body.append(f"│ {label.ljust(28)} │ {value.rjust(width)} │")
    return "\n".join(["      Predicted iteration", f"┌{'─' * 30}┬{'─' * (width + 2)}┐", *body,
                      f"└{'─' * 30}┴{'─' * (width + 2)}┘", "step 5: loss 0.0000"])


README_LIKE = ci_summary("6.703 ms", "0.129 ms", "19.8%", "4 (0.0%); host time: counted work")


def test_mask_joins_a_wrapped_row_and_drops_the_part_read_from_the_clock():
    masked = readme_sample.mask(ci_summary("6.784 ms", "0.210 ms", "19.5%",
                                           "4 (0.0%); host time: counted work + 0.08 ms read from the clock"))
    assert readme_sample.summary_rows(masked)["steady iterations (spread)"] == "4 (0.0%); host time: counted work"
    assert len(readme_sample.summary_rows(masked)) == 5 and masked.splitlines()[-1] == "step 5: loss 0.0000"


def test_host_time_read_from_another_machines_clock_agrees_within_the_determinism_target():
    # what a CI machine printed for the README example, beside what this one did (1.2 % slower)
    ci = ci_summary("6.784 ms", "0.210 ms", "19.5%", "4 (0.0%); host time: counted work + 0.08 ms read from the clock")
    assert readme_sample.differences(readme_sample.mask(README_LIKE), readme_sample.mask(ci)) == []


def test_a_step_time_beyond_the_determinism_target_or_another_compute_time_is_a_difference():
    expected = readme_sample.mask(README_LIKE)
    slower = readme_sample.mask(ci_summary("6.903 ms", "0.329 ms", "19.2%", "4 (0.0%); host time: counted work"))
    assert ([d.split(":")[0] for d in readme_sample.differences(expected, slower)]
            == ["iteration time", "host bound", "MFU"])
    compute = readme_sample.mask(README_LIKE.replace("6.574 ms", "6.575 ms"))
    assert [d.split(":")[0] for d in readme_sample.differences(expected, compute)] == ["compute"]
    loss = readme_sample.mask(README_LIKE.replace("loss 0.0000", "loss 0.0001"))
    assert len(readme_sample.differences(expected, loss)) == 1


def test_the_tolerance_is_the_determinism_target_of_the_readme_example():
    from benchmarks.emulate.determinism import WORKLOADS

    gpt = WORKLOADS["gpt"]
    assert readme_sample.TOLERANCE == gpt.target_spread
    assert readme_sample.SCRIPT_ARGS == [gpt.script, *gpt.args]


def test_readme_first_command_is_the_sampled_one():
    text = (REPO_ROOT / "README.md").read_text()
    assert f'pip install -e ".[dev]" && {" ".join(readme_sample.COMMAND)}' in text


@pytest.mark.slow
def test_readme_sample_is_what_the_command_prints():
    """Runs the README's example (about 20-45 s on 2 cores); on a mismatch run python tools/readme_sample.py --write."""
    text = (REPO_ROOT / "README.md").read_text()
    expected = readme_sample.readme_block(text)
    got = readme_sample.block(readme_sample.mask(readme_sample.run_example()))
    assert readme_sample.differences(expected, got) == [], ("README block is stale: "
                                                            "python tools/readme_sample.py --write")
