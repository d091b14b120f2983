"""emulate/driver/runtime_versions.py: the private export tables' lengths as data keyed by the CUDA runtime's version,
the one-line refusal of an unknown runtime, and what the generated tables answer (built against CI's CUDA 13.0
headers with the 13.0 and the 13.2 layouts)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from stepcast.emulate.driver import build, runtime_versions
from stepcast.emulate.driver.device import driver_environment
from stepcast.profiling.hardware import lookup

CUDA_SUCCESS, CUDA_ERROR_NOT_SUPPORTED = 0, 801
CUDART_INTERFACE = "6bd5fb6c5bf4e74a8987d93912fd9df9"
TOOLS_TLS = "42d85a8123f6cb478298f6e78a3aecdc"
TABLE_21318C60 = "21318c60971432488ca641ff7324c8f2"


def test_an_unknown_runtime_version_is_refused_in_one_line_naming_the_known_ones():
    with pytest.raises(runtime_versions.UnknownRuntime) as refused:
        runtime_versions.runtime(12090)
    message = str(refused.value)
    assert "\n" not in message and "CUDA runtime 12.9 (CUDART_VERSION 12090)" in message
    assert "known: 12.4, 12.6, 12.8, 13.0, 13.2" in message


def test_the_build_reads_the_runtime_version_from_the_header_and_refuses_an_unknown_one(tmp_path):
    header = tmp_path / "cuda_runtime_api.h"
    header.write_text("#ifndef X\n#define CUDART_VERSION  13020\n#endif\n")
    assert build.runtime_version([tmp_path]) == 13020
    header.write_text("#define CUDART_VERSION  13090\n")
    with pytest.raises(build.BuildError) as refused:
        build.runtime_version([tmp_path])
    assert "\n" not in str(refused.value) and "CUDA runtime 13.9" in str(refused.value)
    header.write_text("/* no version */\n")
    with pytest.raises(build.BuildError, match="no '#define CUDART_VERSION <number>' found"):
        build.runtime_version([tmp_path])


def test_every_known_runtime_sizes_each_table_export_c_names():
    named = re.findall(r"(?<!define )FK_TABLE\((\w+)\)", (build.CSRC / "export.c").read_text())
    assert named and len(named) == len(set(named))
    for version, entries in runtime_versions.EXPORT_ENTRIES.items():
        assert sorted(entries) == sorted(named), version


def test_the_generated_tables_are_as_long_as_the_runtime_calls_plus_the_refused_tail():
    tail = runtime_versions.REFUSED_TAIL
    for version, cudart_entries in ((13000, 10), (13020, 13)):
        layout = runtime_versions.generate_export_layout(version)
        n = cudart_entries + tail
        assert f"fk_entry_t fk_cudart_interface[{n}];" in layout
        assert f'cudart_interface_refused_{n - 1}(void) {{ return fk_export_refused("cudart_interface", {n - 1}); }}' \
            in layout


_PROBE = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
def table(uuid_hex):
    ptr = ctypes.c_void_p()
    rc = lib.cuGetExportTable(ctypes.byref(ptr), ctypes.create_string_buffer(bytes.fromhex(uuid_hex), 16))
    assert rc == 0, rc
    return ctypes.cast(ptr, ctypes.POINTER(ctypes.c_void_p))
out = {"init": lib.cuInit(0)}
ctx = ctypes.c_void_p()
lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0); lib.cuCtxSetCurrent(ctx)
cudart = table(sys.argv[2])
out["cudart_bytes"] = cudart[0]
out["entry12"] = ctypes.CFUNCTYPE(ctypes.c_int)(cudart[12])()
out["last"] = ctypes.CFUNCTYPE(ctypes.c_int)(cudart[cudart[0] // 8 - 1])()
state = ctypes.c_void_p(1)
out["tls2"] = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(table(sys.argv[3])[2])(ctypes.addressof(state))
out["state"] = state.value
key, ctx_id = ctypes.c_ulonglong(0), ctypes.c_ulonglong(0)
fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(table(sys.argv[4])[4])
out["key_rc"] = fn(None, ctypes.addressof(key))
lib.cuCtxGetId(ctx, ctypes.byref(ctx_id))
out["key"], out["ctx_id"] = key.value, ctx_id.value
print(json.dumps(out))
"""


def _probe(driver: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEPCAST_GPU", "STEPCAST_DRIVER"))}
    env.update(driver_environment(lookup("h100-sxm")))
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(driver), CUDART_INTERFACE, TOOLS_TLS, TABLE_21318C60],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture()
def drivers(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """The driver as built for CI's CUDA 13.0 runtime, and one built from the same headers with CUDA 13.2's table
    layout (in its own cache folder)."""
    ci = build.driver_path()
    monkeypatch.setitem(runtime_versions.EXPORT_ENTRIES, build.runtime_version(),
                        runtime_versions.EXPORT_ENTRIES[13020])
    monkeypatch.setenv("STEPCAST_CACHE_DIR", str(tmp_path / "cache"))
    return ci, build.driver_path()


def test_the_13_2_layout_answers_entry_12_and_each_layout_refuses_past_its_measured_length(drivers):
    """Entry 12 is within 13.2's measured length (13); the tail past each length is refused, and a documented entry
    in the tail answers as documented (a newer static runtime in the same process may call it)."""
    tail = runtime_versions.REFUSED_TAIL
    ci, newer = (_probe(d) for d in drivers)
    assert (ci["cudart_bytes"], newer["cudart_bytes"]) == ((10 + tail) * 8, (13 + tail) * 8)
    assert (ci["last"], newer["last"]) == (CUDA_ERROR_NOT_SUPPORTED, CUDA_ERROR_NOT_SUPPORTED)
    assert (ci["entry12"], newer["entry12"]) == (CUDA_SUCCESS, CUDA_SUCCESS)


def test_cublaslt_context_key_is_the_context_id_and_tools_state_is_none():
    """tools_tls entry 2 writes NULL (no tools state); table 21318c60's entry 4 the current context's id."""
    out = _probe(build.driver_path())
    assert out["init"] == CUDA_SUCCESS
    assert (out["tls2"], out["state"]) == (CUDA_SUCCESS, None)
    assert out["key_rc"] == CUDA_SUCCESS and out["key"] == out["ctx_id"] != 0
