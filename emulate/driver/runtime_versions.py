"""What differs between the CUDA runtimes the emulated driver serves, as data keyed by the runtime's version, and
the C that :mod:`emulate.driver.build` generates from it (``export_layout.c``).

The runtime (torch's ``libcudart`` and the static copies inside cuBLASLt and cuDNN) asks the driver for private
tables of function pointers by UUID (``cuGetExportTable``, csrc/export.c) and calls their entries by index, without
checking their length: a table shorter than what the runtime calls sends it to whatever lies past the table's end
(CUDA 13.2's ``libcudart`` calls entry 12 of CUDART_INTERFACE inside ``cudaGetDeviceCount``; a 10-entry table made
that a jump to address 0). So each table is answered with as many entries as the runtime of that version calls
(:data:`EXPORT_ENTRIES`), plus :data:`REFUSED_TAIL` more. An entry whose behaviour csrc/export.c documents is filled
there wherever the table reaches it; every other one is *refused*: a generated function that logs
``{"event": "export_entry_refused", "table", "index"}`` once and answers CUDA_ERROR_NOT_SUPPORTED.

The tail is there because one process holds several runtimes, and the static ones can be newer than ``libcudart``
(the driver logs each one's version as ``{"event": "runtime"}``): torch 2.6.0's process (libcudart 12.4) also runs
12.3 and 12.9 runtimes, torch 2.15.0's (13.2) a 13.4 one inside cuBLAS 13.4. A call one of them makes past what was
measured is then refused and logged instead of jumping to an address that is not a function.

The runtime's version is found from the installed wheels (``CUDART_VERSION`` in ``cuda_runtime_api.h``, the header
of the same ``libcudart`` torch loads); a version not in :data:`EXPORT_ENTRIES` is refused in one line naming it and
the versions known (:func:`runtime`), since an unmeasured runtime may call past a table's end.

How the entry counts were measured (2026-12): the driver built with every table 32 entries long (12.6: with the
lengths below and their refused tail), all undocumented entries refused (``STEPCAST_DRIVER_DEBUG=1`` prints each
refusal), running the README example (``examples/gpt.py``), ``examples/compat/`` hf_llama, compiled_mlp (default
mode) and resnet50 (bf16, channels-last), and ``examples/ddp.py`` on 2 ranks under torch 2.6.0 (CUDA 12.4), 2.7.1
(12.6), 2.9.1 (12.8), 2.14.1 (13.0) and 2.15.0 (13.2). Each count covers the highest entry called (the documented
ones are called silently; the only refused call was table 1734dc26's entry 4, from cuBLASLt, see export.c) and at
least the length ZLUDA documents for the table (github.com/vosen/ZLUDA, dark_api).
"""
from __future__ import annotations

import re
from pathlib import Path

from stepcast.errors import UnavailableError


class UnknownRuntime(UnavailableError):
    """The installed CUDA runtime's version is not in the table; the message (one line) names it and the known."""


#: entries past what any measured runtime calls, refused (see the module docstring)
REFUSED_TAIL = 8

#: the lengths every measured runtime shares, by the names csrc/export.c gives the tables (its FK_TABLE list):
#: CUDART_INTERFACE 10 (entries 1, 2, 6-9 called), tools hooks 7 (2, 6), TOOLS_TLS 4 (2), context-local storage 4
#: (0-2 functions, 3 NULL), context checks 4 (2, 3), integrity 3 (1), tables 21318c60 and 1734dc26 5 (4)
_COMMON = {"cudart_interface": 10, "tools_hooks": 7, "tools_tls": 4, "context_storage": 4, "context_checks": 4,
           "integrity": 3, "table_21318c60": 5, "table_1734dc26": 5}

#: CUDART_VERSION -> entries per table (entry 0 included) the runtime of that version calls, measured as the module
#: docstring says. Each new runtime release is measured and added here.
EXPORT_ENTRIES: dict[int, dict[str, int]] = {
    12040: _COMMON,
    12060: _COMMON,
    12080: _COMMON,
    13000: _COMMON,
    13020: {**_COMMON, "cudart_interface": 13},  # entry 12: called once as the runtime loads the driver
}

_CUDART_VERSION = re.compile(r"^\s*#\s*define\s+CUDART_VERSION\s+(\d+)", re.MULTILINE)


def version_name(version: int) -> str:
    """``13020`` -> ``'13.2'``."""
    return f"{version // 1000}.{version % 1000 // 10}"


def cudart_version(runtime_api_h: Path) -> int:
    """``CUDART_VERSION`` of a ``cuda_runtime_api.h`` (the runtime wheel's, beside the ``libcudart`` torch loads)."""
    found = _CUDART_VERSION.search(runtime_api_h.read_text(errors="replace"))
    if not found:
        raise UnknownRuntime(f"{runtime_api_h}: no '#define CUDART_VERSION <number>' found; expected the CUDA "
                             "runtime's header from torch's NVIDIA wheels")
    return int(found.group(1))


def runtime(version: int) -> dict[str, int]:
    """The export-table entry counts for a runtime version; an unknown version raises UnknownRuntime (one line)."""
    if version not in EXPORT_ENTRIES:
        known = ", ".join(version_name(v) for v in sorted(EXPORT_ENTRIES))
        raise UnknownRuntime(
            f"CUDA runtime {version_name(version)} (CUDART_VERSION {version}) is not known to the emulated driver "
            f"(known: {known}): its private export tables were never measured, so it could call past their end; "
            "install a torch built for a known CUDA version")
    return EXPORT_ENTRIES[version]


def generate_export_layout(version: int) -> str:
    """C source defining each table (``fk_<name>``, zeroed, filled by csrc/export.c), its length
    (``fk_<name>_entries``: what ``version`` calls plus the refused tail) and one refusing function per entry
    (``fk_<name>_refused[i]``)."""
    entries = {name: count + REFUSED_TAIL for name, count in runtime(version).items()}
    out = [f"/* generated by emulate/driver/build.py from emulate/driver/runtime_versions.py: the private tables "
           f"for CUDA runtime {version_name(version)} (CUDART_VERSION {version}) */",
           "#include \"fakecuda.h\"",
           f"const int fk_runtime_version = {version};"]
    for name, count in entries.items():
        out.append(f"fk_entry_t fk_{name}[{count}];")
        out.append(f"const int fk_{name}_entries = {count};")
        for i in range(count):
            out.append(f"static CUresult {name}_refused_{i}(void) {{ return fk_export_refused(\"{name}\", {i}); }}")
        refs = ", ".join(f"(const void *){name}_refused_{i}" for i in range(count))
        out.append(f"const void *const fk_{name}_refused[{count}] = {{{refs}}};")
    return "\n".join(out) + "\n"
