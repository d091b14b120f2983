"""Every ``STEPCAST_*`` environment variable the project reads, declared once: its type, default, allowed values,
one-line meaning, who reads it, and whether a user sets it or the launcher sets it for the rank processes.

Python reads user-facing settings only through :func:`get` (a bad value is one line naming the variable and what
was expected: :class:`SettingError`); the command-line tools check every user-facing setting before they start any
work (:func:`check_environment`), so a typo is refused in a second instead of after a build or a capture. The C
side (the emulated driver, emulate/driver/csrc) reads its variables with ``getenv``; they are declared here all the same,
so the launcher's checks and the documentation cover them. ``docs/configuration.md`` is generated from this table:
``python -m stepcast.settings --markdown > docs/configuration.md``.

Only the standard library (and :mod:`stepcast.errors`, which imports nothing else) is imported, so every package
(and the capture layer inside the user's process) can read settings without pulling anything else in.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from stepcast.errors import BAD_INPUT, InputError, cli_main, report

USER = "user"
INTERNAL = "internal"
Audience = Literal["user", "internal"]


class SettingError(InputError):
    """A setting (environment variable or command-line option) with a value it cannot take; one line:
    ``<setting>: expected <what>, found <value>``."""


@dataclass(frozen=True)
class Kind:
    """How a setting's text becomes its value: ``convert`` raises ValueError for text it cannot take, and
    ``expected`` says what it takes, in the words of the one-line error."""
    expected: str
    convert: Callable[[str], Any]

    def parse(self, raw: str, label: str) -> Any:
        """The value of text ``raw``; :class:`SettingError` names ``label`` when this kind cannot take it."""
        try:
            return self.convert(raw)
        except (ValueError, KeyError):
            raise SettingError(f"{label}: expected {self.expected}, found {raw!r}") from None


def _positive_number(raw: str) -> float:
    value = float(raw)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(raw)
    return value


def whole_number(minimum: int) -> Kind:
    """An integer >= ``minimum`` written as one (``"2.5"`` and ``"1e3"`` are refused, as a C ``strtol`` would stop)."""
    def convert(raw: str) -> int:
        value = int(raw.strip())
        if value < minimum:
            raise ValueError(raw)
        return value

    return Kind(f"a whole number >= {minimum}", convert)


def one_of(*values: str) -> Kind:
    """Exactly one of ``values`` (case matters: the C side compares with ``strcmp``)."""
    def convert(raw: str) -> str:
        if raw not in values:
            raise ValueError(raw)
        return raw

    return Kind(f"one of {', '.join(values)}", convert)


_SWITCH = {"on": True, "1": True, "true": True, "yes": True, "off": False, "0": False, "false": False, "no": False}


def _switch(raw: str) -> bool:
    return _SWITCH[raw.strip().lower()]


def _names(raw: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def _existing_folder(raw: str) -> Path:
    path = Path(raw).expanduser()
    if not path.is_dir():
        raise ValueError(raw)
    return path


def _moe_routing(raw: str) -> str:
    """``balanced``, ``power:ALPHA`` (ALPHA > 0) or ``histogram:FILE`` (an existing file; its contents are checked by
    emulate/stated_routing.py, which reads it)."""
    text = raw.strip()
    kind, _, value = text.partition(":")
    if text == "balanced" or (kind == "histogram" and Path(value).expanduser().is_file()):
        return text
    if kind == "power":
        _positive_number(value)
        return text
    raise ValueError(raw)


POSITIVE_NUMBER = Kind("a positive finite number", _positive_number)
MOE_ROUTING = Kind("balanced, power:ALPHA (ALPHA > 0) or histogram:FILE (an existing JSON file)", _moe_routing)
SWITCH = Kind("one of on, off (or 1, 0, true, false, yes, no)", _switch)
PRESENCE = Kind("any value (set: on)", lambda raw: True)
NAMES = Kind("comma-separated names", _names)
TEXT = Kind("text", str)
FOLDER = Kind("a folder path", lambda raw: Path(raw).expanduser())
EXISTING_FOLDER = Kind("an existing folder", _existing_folder)
FILE = Kind("a file path", Path)


@dataclass(frozen=True)
class Setting:
    """One environment variable. Unset or empty, it takes ``default``; ``default_text`` says it in words where the
    reader computes it (a path under the home folder, say). ``option`` is the command-line flag that overrides it
    for one run; ``read_by`` names the code that reads it."""
    name: str
    kind: Kind
    default: Any
    meaning: str
    audience: Audience = USER
    read_by: str = "Python"
    option: str | None = None
    default_text: str | None = None

    def parse(self, raw: str | None, label: str | None = None) -> Any:
        """The value of text ``raw`` (None or empty: the default); :class:`SettingError` names ``label`` (default:
        the variable) when the text is not one this setting takes."""
        if raw is None or raw == "":
            return self.default
        return self.kind.parse(raw, label or self.name)

    def shown_default(self) -> str:
        if self.default_text is not None:
            return self.default_text
        if self.default is None:
            return "unset"
        if isinstance(self.default, bool):
            return "on" if self.default else "off"
        if isinstance(self.default, tuple):
            return ",".join(self.default) or "empty"
        return str(self.default)


def _gpu(name: str, meaning: str, kind: Kind | None = None) -> Setting:
    """A ``STEPCAST_GPU_*`` figure of the virtual GPU, set by the launcher from the hardware catalog."""
    return Setting(f"STEPCAST_GPU_{name}", kind or whole_number(0), None, meaning, INTERNAL,
                   "driver (C); Python", default_text="from --hardware")


_DECLARED: tuple[Setting, ...] = (
    # -- where files are ------------------------------------------------------------------------------------------
    Setting("STEPCAST_CACHE_DIR", FOLDER, None, "where builds (the emulated driver, op-context hook), parsed measurements, "
            "run folders and Hydra records are cached", default_text="$XDG_CACHE_HOME/stepcast, else "
            "~/.cache/stepcast"),
    Setting("STEPCAST_OUTPUTS", FOLDER, None, "where the Hydra apps (stepcast profile, stepcast train) write their "
            "run records", read_by="Hydra configs (conf/)", default_text="$STEPCAST_CACHE_DIR/outputs"),
    Setting("STEPCAST_SHARED_DATA", FOLDER, None, "root of the third-party GPU measurements (read only; benchmarks "
            "and tests that need it say so when it is absent)", default_text="../shared/data beside the checkout"),
    Setting("STEPCAST_DATA_DIR", FOLDER, None, "where data the user adds goes: profiled datasets (datasets/), "
            "described devices (hardware/), bundles loaded by name (models/), the MLflow store (mlflow.db)", default_text="the checkout, run from "
            "one; installed, $XDG_DATA_HOME/stepcast, else ~/.local/share/stepcast"),
    Setting("STEPCAST_HARDWARE_DIR", EXISTING_FOLDER, None, "the hardware catalog (one YAML file per device), in place "
            "of the shipped one and the user's entries", default_text="the shipped catalog (conf/hardware) with the "
            "user's entries (STEPCAST_DATA_DIR's hardware/) over it"),
    Setting("STEPCAST_KEEP_RUNS", whole_number(1), 20, "run folders kept under the cache's runs/ when a run starts "
            "(the newest; a folder a live run holds is never removed)"),
    # -- the estimators -------------------------------------------------------------------------------------------
    Setting("STEPCAST_ESTIMATOR", TEXT, None, "the kernel-runtime estimator estimator.load() gives by default: a "
            "name, a bundle folder or an MLflow URI", default_text="models/xgboost (shipped)"),
    Setting("STEPCAST_INSTEP", SWITCH, True, "scale predicted kernel times per family by in-step measurements of "
            "the target GPU where there are some (emulate.sim.instep)"),
    Setting("STEPCAST_INSTEP_EXCLUDE", NAMES, (), "models (NeuSight config stems) and GPUs (catalog ids) left out "
            "of the in-step calibration: the end-to-end benchmark holds out the model it scores, and with --unseen "
            "its GPU, which then takes the other GPUs' pooled factors"),
    # -- the simulation -------------------------------------------------------------------------------------------
    Setting("STEPCAST_HOST_SPEED", POSITIVE_NUMBER, 1.0, "speed of the target's host CPU relative to the reference "
            "host: every host gap is divided by it", option="--host-speed"),
    Setting("STEPCAST_LAUNCH_QUEUE_DEPTH", whole_number(1), 1024, "device operations a host thread may have pending "
            "before its next launch blocks", option="--launch-queue"),
    Setting("STEPCAST_COMM_CONTENTION", SWITCH, True, "lengthen a GPU-filling kernel by the SMs a collective "
            "of its rank holds while they overlap (emulate.sim.contention)"),
    Setting("STEPCAST_HOST_MODEL", one_of("counted", "measured"), "counted", "host time from the work counted "
            "before each call at reference costs (counted), or the capture's own clock (measured)",
            read_by="Python; driver (C)"),
    # -- the capture ----------------------------------------------------------------------------------------------
    Setting("STEPCAST_DEDUP_CONFIRM", whole_number(0), 1, "iterations after the first compared one in which a rank "
            "must still match a lower rank to stop as its duplicate (a program diverging later is assumed not to: "
            "--no-dedup runs every rank)", read_by="capture layer"),
    Setting("STEPCAST_STALL_LIMIT_S", POSITIVE_NUMBER, 600.0, "seconds the ranks still running may together use "
            "under 1 % of a core before the launcher stops them as hung (a rank blocked for good, after the others "
            "ended, uses no CPU; one compiling or capturing uses a core) and the run ends with exit 3"),
    Setting("STEPCAST_WAIT_LIMIT_S", POSITIVE_NUMBER, 120.0, "seconds a rank may wait on others while no rank of "
            "the run calls the driver: then a small collective's wait is a deadlock and rank dedup's gives dedup up "
            "(a peer still on its way, compiling on a loaded machine, keeps it waiting; a run in which every rank "
            "waits is a deadlock at once)", read_by="driver (C)"),
    Setting("STEPCAST_FIXED_LAYOUT", SWITCH, True, "start rank processes with address-space layout randomisation "
            "off, so captured CPU times do not depend on where the loader placed code"),
    Setting("STEPCAST_EVENT_TIMING", one_of("predicted", "nominal"), "predicted", "what CUDA event timings answer "
            "inside the script (autotuners): the predicted device time, or 1 us per piece of work"),
    Setting("STEPCAST_REAL_BYTES", whole_number(1), 1 << 20, "largest copy, fill or small collective whose bytes "
            "are kept, so metadata exchanges carry real values (integer and mask tensors the op-context hook "
            "replays are followed up to 64 MiB)", read_by="driver (C); op-context hook (C++)"),
    Setting("STEPCAST_MOE_ROUTING", MOE_ROUTING, None, "the tokens-per-expert routing a mixture-of-experts "
            "router's top-k gives (emulate/stated_routing.py): balanced, a power law of exponent ALPHA "
            "(aiconfigurator's generator), or a histogram recorded on a real run", read_by="capture layer",
            option="--moe-routing", default_text="balanced (the report warns that it was not stated)"),
    Setting("STEPCAST_CXX11_ABI", one_of("0", "1"), None, "the `_GLIBCXX_USE_CXX11_ABI` the op-context hook is "
            "compiled with (torch's own: 0 in torch 2.6.0's wheels, 1 in 2.9.1's and later)",
            default_text="torch's, from libc10.so's symbols"),
    Setting("STEPCAST_DRIVER_DEBUG", PRESENCE, False, "log occupancy answers and print unsupported driver entry "
            "points", read_by="driver (C)"),
    # -- set by the launcher for each rank process ------------------------------------------------------------------
    Setting("STEPCAST_LOG", FILE, None, "this rank's capture log (the driver's op table and event summary are named "
            "after it)", INTERNAL, "capture layer", default_text="rankK.log in the run folder"),
    Setting("STEPCAST_RUN_ID", TEXT, None, "names the run's shared-memory areas (/dev/shm/stepcast-ID-*)",
            INTERNAL, "driver (C); capture layer"),
    Setting("STEPCAST_LAUNCHER_PID", whole_number(1), None, "the launcher's pid: a rank whose parent is already gone "
            "exits at once", INTERNAL, "capture layer"),
    Setting("STEPCAST_OPCTX", TEXT, None, "the op-context hook library (empty: Python's dispatch mode records op "
            "context)", INTERNAL, "capture layer", option="--python-op-context"),
    Setting("STEPCAST_DEDUP", one_of("0", "1"), "1", "stop ranks identical to a lower one and rebuild their traces",
            INTERNAL, "capture layer", option="--no-dedup"),
    Setting("STEPCAST_RUN_RANKS", NAMES, None, "the ranks that run in a sparse run (comma-separated)", INTERNAL,
            "capture layer", option="--run-ranks"),
    Setting("STEPCAST_DRIVER", FILE, None, "the emulated driver (libcuda.so.1), whose capture API the capture layer "
            "loads", INTERNAL, "capture layer"),
    Setting("STEPCAST_DRIVER_LOG", FILE, None, "the emulated driver's log prefix (PREFIX.PID.jsonl per process)",
            INTERNAL, "driver (C); Python"),
    Setting("STEPCAST_DRIVER_ATTRS", TEXT, None, "the virtual device's attributes, ID=VALUE,... (ids of "
            "CUdevice_attribute)", INTERNAL, "driver (C)"),
    Setting("STEPCAST_DRIVER_GPCS", whole_number(1), None, "GPCs the virtual device's SMs are split over", INTERNAL,
            "driver (C)"),
    Setting("STEPCAST_DEVICE_COUNT", whole_number(1), 1, "virtual devices each rank sees (ranks per node)", INTERNAL,
            "driver (C)", option="--nproc"),
    _gpu("NAME", "the device name torch reports", TEXT),
    _gpu("MEM_BYTES", "device memory in bytes"),
)

SETTINGS: dict[str, Setting] = {s.name: s for s in _DECLARED}


def get(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The value of setting ``name`` from ``environ`` (default: this process's environment); a bad value raises
    :class:`SettingError`. An undeclared name is a bug (KeyError)."""
    env = os.environ if environ is None else environ
    return SETTINGS[name].parse(env.get(name))


def parse_option(name: str, option: str, given: Any) -> Any:
    """A value that overrides setting ``name`` for one run (a command-line option's text, or a library caller's
    argument): held to what the variable may take, the error naming ``option``; None (not given) is the variable's
    own value."""
    if given is None:
        return get(name)
    return SETTINGS[name].parse(given if isinstance(given, str) else str(given), label=option)


def check_environment(environ: Mapping[str, str] | None = None) -> list[str]:
    """One line for each user-facing setting whose value in ``environ`` it cannot take (nothing when all are
    good). Internal settings are the launcher's to set and are not checked."""
    env = os.environ if environ is None else environ
    problems = []
    for setting in _DECLARED:
        if setting.audience == USER:
            try:
                setting.parse(env.get(setting.name))
            except SettingError as exc:
                problems.append(str(exc))
    return problems


def markdown() -> str:
    """docs/configuration.md: every setting, user-facing ones first."""
    lines = ["# Configuration", "",
             "<!-- Generated by `python -m stepcast.settings --markdown > docs/configuration.md` from",
             "     stepcast/settings.py; edit that file, not this one (tests/stepcast/test_settings.py checks that",
             "     they agree). -->",
             "",
             textwrap.fill(
                 "stepcast reads the `STEPCAST_*` environment variables below. Unset or empty, a variable takes its "
                 "default. Every `stepcast` command checks the variables you may set before it starts any work: a "
                 "value one cannot take ends the command with one line, `stepcast: <variable>: expected <what>, "
                 "found <value>`, and exit status 2 (`python -m stepcast.settings --check` checks your shell's the "
                 "same way). A command-line option, where there is one, overrides the variable for one run.",
                 width=116),
             "", "## Settings you may set", "",
             *_table(s for s in _DECLARED if s.audience == USER), "",
             "## Set by the launcher", "",
             textwrap.fill(
                 "`stepcast run` sets these for each rank process it starts (from its options and the hardware "
                 "catalog); they are listed so that every variable the code reads is "
                 "declared. They are not for you to set.", width=116), "",
             *_table(s for s in _DECLARED if s.audience == INTERNAL)]
    return "\n".join(lines) + "\n"


def _table(settings) -> list[str]:
    rows = ["| Variable | Takes | Default | Option | Read by | Meaning |", "|---|---|---|---|---|---|"]
    for s in settings:
        option = f"`{s.option}`" if s.option else ""
        literal = s.default_text is None and s.default is not None
        default = f"`{s.shown_default()}`" if literal else s.shown_default()
        rows.append(f"| `{s.name}` | {s.kind.expected} | {default} | {option} | {s.read_by} | {s.meaning} |")
    return rows


@cli_main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stepcast.settings",
                                     description="The STEPCAST_* settings: print them, or check this environment's.")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--markdown", action="store_true", help="print docs/configuration.md")
    what.add_argument("--check", action="store_true", help="check the settings of this environment (exit 2: bad)")
    ns = parser.parse_args(argv)
    if ns.markdown:
        sys.stdout.write(markdown())
        return 0
    problems = check_environment()
    for problem in problems:
        report(problem)
    return BAD_INPUT if problems else 0


if __name__ == "__main__":
    sys.exit(main())
