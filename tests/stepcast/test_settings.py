"""The settings registry: every STEPCAST_* variable the source tree reads is declared there once, user-facing ones
are read only through it, docs/configuration.md is what it generates, and each kind of value takes what it says
and refuses the rest in one line naming the variable."""
from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from stepcast.profiling.paths import REPO_ROOT
from stepcast import settings

#: where the product's code, configs and tools live, and the benchmarks (tests may set variables of their own)
SOURCE_ROOTS = ("emulate", "estimator", "profiling", "stepcast", "tools", "examples", "conf", "benchmarks")
SOURCE_SUFFIXES = {".py", ".c", ".h", ".cpp", ".yaml", ".sh"}
TOKEN = re.compile(r"STEPCAST_[A-Z0-9_]+")
C_MACRO = re.compile(r"#\s*(?:define|ifndef)\s+(STEPCAST_[A-Z0-9_]+)")
#: a Python read of the process environment (os.environ.get, os.environ[...], os.getenv)
ENV_READ = re.compile(r"""(?:environ\.get\(|environ\[|getenv\()\s*["'](STEPCAST_[A-Z0-9_]+)["']""")


def source_files(root: Path) -> list[Path]:
    return [p for top in SOURCE_ROOTS if (root / top).is_dir() for p in sorted((root / top).rglob("*"))
            if p.suffix in SOURCE_SUFFIXES and p.is_file()]


def undeclared_variables(root: Path) -> dict[str, list[str]]:
    """Each STEPCAST_ name in the source not declared in the registry -> the files naming it. C include guards
    are macros, not variables; a name ending in ``_`` (``STEPCAST_GPU_*`` in prose) must prefix a declared one."""
    files = source_files(root)
    macros = {m for p in files for m in C_MACRO.findall(p.read_text(errors="replace"))}
    found: dict[str, list[str]] = {}
    for path in files:
        for name in set(TOKEN.findall(path.read_text(errors="replace"))) - macros:
            known = (any(d.startswith(name) for d in settings.SETTINGS) if name.endswith("_")
                     else name in settings.SETTINGS)
            if not known:
                found.setdefault(name, []).append(str(path.relative_to(root)))
    return found


def user_setting_reads(root: Path) -> list[str]:
    """``file:line`` of each Python read of a user-facing variable from the environment outside the registry."""
    user = {s.name for s in settings.SETTINGS.values() if s.audience == settings.USER}
    reads = []
    for path in source_files(root):
        if path.suffix != ".py" or path.resolve() == Path(settings.__file__).resolve():
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if any(name in user for name in ENV_READ.findall(line)):
                reads.append(f"{path.relative_to(root)}:{number}")
    return reads


def test_every_stepcast_variable_in_the_source_is_declared():
    assert undeclared_variables(REPO_ROOT) == {}


def test_an_undeclared_variable_is_found_in_python_c_and_yaml(tmp_path):
    (tmp_path / "emulate").mkdir()
    (tmp_path / "emulate" / "a.py").write_text('os.environ.get("STEPCAST_NEW_KNOB")\n')
    (tmp_path / "emulate" / "b.c").write_text('#ifndef STEPCAST_B_H\n#define STEPCAST_B_H\ngetenv("STEPCAST_C");\n')
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "c.yaml").write_text("dir: ${oc.env:STEPCAST_ELSEWHERE,x}\n")
    assert undeclared_variables(tmp_path) == {"STEPCAST_NEW_KNOB": ["emulate/a.py"], "STEPCAST_C": ["emulate/b.c"],
                                              "STEPCAST_ELSEWHERE": ["conf/c.yaml"]}


def test_user_facing_settings_are_read_only_through_the_registry():
    assert user_setting_reads(REPO_ROOT) == []


def test_a_direct_read_of_a_user_facing_setting_is_found(tmp_path):
    (tmp_path / "profiling").mkdir()
    (tmp_path / "profiling" / "x.py").write_text('import os\nos.environ.get("STEPCAST_HOST_SPEED", "1")\n'
                                                 'os.environ["STEPCAST_LOG"]\n')
    assert user_setting_reads(tmp_path) == ["profiling/x.py:2"]


def test_committed_configuration_page_is_what_the_registry_generates():
    committed = (REPO_ROOT / "docs" / "configuration.md").read_text()
    assert committed == settings.markdown(), ("docs/configuration.md is stale: python -m stepcast.settings "
                                              "--markdown > docs/configuration.md")


def test_configuration_page_lists_every_setting_once():
    page = settings.markdown()
    for name in settings.SETTINGS:
        assert page.count(f"| `{name}` |") == 1, name


def test_no_setting_is_declared_twice():
    names = [s.name for s in settings._DECLARED]
    assert len(names) == len(set(names))


def test_every_default_is_a_value_its_kind_takes():
    for s in settings.SETTINGS.values():
        if s.default is not None and s.kind is not settings.PRESENCE and not isinstance(s.default, (bool, tuple)):
            assert s.parse(str(s.default)) == s.default, s.name


@pytest.mark.parametrize("raw", ["0", "-1", "nan", "inf", "-inf", "fast", "1,5"])
def test_host_speed_refuses_what_is_not_positive_and_finite(raw):
    with pytest.raises(settings.SettingError) as caught:
        settings.get("STEPCAST_HOST_SPEED", {"STEPCAST_HOST_SPEED": raw})
    assert str(caught.value) == f"STEPCAST_HOST_SPEED: expected a positive finite number, found {raw!r}"


def test_host_speed_takes_positive_numbers_and_defaults_when_unset_or_empty():
    assert settings.get("STEPCAST_HOST_SPEED", {"STEPCAST_HOST_SPEED": "2.5"}) == 2.5
    assert settings.get("STEPCAST_HOST_SPEED", {"STEPCAST_HOST_SPEED": "1e-1"}) == pytest.approx(0.1)
    assert settings.get("STEPCAST_HOST_SPEED", {}) == settings.get("STEPCAST_HOST_SPEED", {"STEPCAST_HOST_SPEED": ""})
    assert math.isclose(settings.get("STEPCAST_HOST_SPEED", {}), 1.0)


@pytest.mark.parametrize("raw", ["0", "1.5", "1e3", "deep", "-4"])
def test_whole_numbers_refuse_fractions_exponents_and_values_below_the_minimum(raw):
    with pytest.raises(settings.SettingError, match=r"^STEPCAST_LAUNCH_QUEUE_DEPTH: expected a whole number >= 1"):
        settings.get("STEPCAST_LAUNCH_QUEUE_DEPTH", {"STEPCAST_LAUNCH_QUEUE_DEPTH": raw})


def test_choices_are_exact_as_the_c_side_compares_them():
    assert settings.get("STEPCAST_HOST_MODEL", {"STEPCAST_HOST_MODEL": "measured"}) == "measured"
    with pytest.raises(settings.SettingError,
                       match=r"^STEPCAST_HOST_MODEL: expected one of counted, measured, found 'Measured'$"):
        settings.get("STEPCAST_HOST_MODEL", {"STEPCAST_HOST_MODEL": "Measured"})


@pytest.mark.parametrize("raw, value", [("off", False), ("0", False), ("No", False), ("on", True), ("TRUE", True)])
def test_switches_take_the_usual_spellings(raw, value):
    assert settings.get("STEPCAST_INSTEP", {"STEPCAST_INSTEP": raw}) is value


def test_a_switch_refuses_anything_else():
    with pytest.raises(settings.SettingError, match=r"^STEPCAST_FIXED_LAYOUT: expected one of on, off"):
        settings.get("STEPCAST_FIXED_LAYOUT", {"STEPCAST_FIXED_LAYOUT": "sometimes"})


def test_names_are_split_on_commas_without_blanks():
    assert settings.get("STEPCAST_INSTEP_EXCLUDE", {"STEPCAST_INSTEP_EXCLUDE": " a, b,,c "}) == ("a", "b", "c")


def test_an_option_is_parsed_as_its_variable_and_named_in_the_error():
    assert settings.parse_option("STEPCAST_HOST_SPEED", "--host-speed", "3") == 3.0
    assert settings.parse_option("STEPCAST_LAUNCH_QUEUE_DEPTH", "queue_depth", 64) == 64
    with pytest.raises(settings.SettingError, match=r"^--host-speed: expected a positive finite number, found '0'$"):
        settings.parse_option("STEPCAST_HOST_SPEED", "--host-speed", "0")


def test_an_option_not_given_is_the_variables_value(monkeypatch):
    monkeypatch.setenv("STEPCAST_LAUNCH_QUEUE_DEPTH", "16")
    assert settings.parse_option("STEPCAST_LAUNCH_QUEUE_DEPTH", "--launch-queue", None) == 16


def test_check_environment_reports_each_bad_user_setting_and_ignores_internal_ones():
    env = {"STEPCAST_HOST_SPEED": "0", "STEPCAST_HOST_MODEL": "measured", "STEPCAST_EVENT_TIMING": "x",
           "STEPCAST_GPU_MEM_BYTES": "many", "STEPCAST_UNDECLARED": "whatever"}
    assert settings.check_environment(env) == [
        "STEPCAST_HOST_SPEED: expected a positive finite number, found '0'",
        "STEPCAST_EVENT_TIMING: expected one of predicted, nominal, found 'x'"]


def test_simulation_config_reads_the_variable_when_used(monkeypatch):
    from stepcast.emulate import config

    monkeypatch.setenv("STEPCAST_HOST_SPEED", "4")
    assert config.HOST_SPEED == 4.0
    monkeypatch.setenv("STEPCAST_HOST_SPEED", "zero")
    with pytest.raises(settings.SettingError, match="^STEPCAST_HOST_SPEED: expected"):
        config.HOST_SPEED


def test_bad_variables_never_break_an_import():
    env = {"STEPCAST_HOST_SPEED": "x", "STEPCAST_LAUNCH_QUEUE_DEPTH": "x", "STEPCAST_HOST_MODEL": "x",
           "STEPCAST_INSTEP": "x", "STEPCAST_FIXED_LAYOUT": "x", "STEPCAST_KEEP_RUNS": "x"}
    code = "import emulate.config, emulate.simulate, emulate.cli, emulate.run_dirs, emulate.sim.engine, stepcast.cli"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True,
                          env={**os.environ, **env})
    assert done.returncode == 0, done.stderr[-2000:]


def test_check_command_prints_one_line_per_bad_setting():
    env = {**os.environ, "STEPCAST_EVENT_TIMING": "sundial", "STEPCAST_KEEP_RUNS": "-1"}
    done = subprocess.run([sys.executable, "-m", "stepcast.settings", "--check"], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["stepcast: STEPCAST_KEEP_RUNS: expected a whole number >= 1, found '-1'",
                                        "stepcast: STEPCAST_EVENT_TIMING: expected one of predicted, nominal, found "
                                        "'sundial'"]
