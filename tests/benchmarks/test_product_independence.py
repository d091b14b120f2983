"""The product does not depend on the benchmarks: no module of emulate/, estimator/, profiling/ or stepcast/ imports
``benchmarks`` (at module level or inside a function), and running a prediction loads no ``benchmarks.*`` module.
The benchmarks live in a checkout only (not installed), so a product import of them would fail for every user."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from stepcast.profiling.paths import REPO_ROOT

PRODUCT_PACKAGES = ("emulate", "estimator", "profiling", "stepcast")
BENCHMARKS = "benchmarks"
#: the modules a prediction goes through: the CLI, the simulator, and the estimator's predict entry point
ENTRY_MODULES = ("stepcast.cli", "stepcast.emulate.cli", "stepcast.emulate.simulate", "stepcast.emulate.replay",
                 "stepcast.estimator.predict", "stepcast.emulate.sim.durations", "stepcast.estimator.conv_families",
                 "stepcast.estimator.routing", "stepcast.estimator.train")


def imported_names(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every import in ``tree``: ``import a.b`` gives a.b, ``from a import b`` gives a.b and
    ``from a.b import c`` gives a.b.c (so a benchmark module imported by name from its package counts too)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in (
                "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
            out.append((node.lineno, str(node.args[0].value)))
    return out


def benchmark_imports(paths: list[Path]) -> list[str]:
    """``path:line: module`` of each import of the benchmarks tree among ``paths`` (Python sources)."""
    found = []
    for path in paths:
        tree = ast.parse(path.read_text(), filename=str(path))
        for line, name in imported_names(tree):
            if name == BENCHMARKS or name.startswith(f"{BENCHMARKS}."):
                found.append(f"{path}:{line}: {name}")
    return found


def product_sources() -> list[Path]:
    return sorted(p for package in PRODUCT_PACKAGES for p in (REPO_ROOT / package).rglob("*.py"))


def test_no_product_module_imports_the_benchmarks():
    sources = product_sources()
    assert len(sources) > 100, "the product's sources were not found"
    assert benchmark_imports(sources) == []


@pytest.mark.parametrize("source", [
    "import benchmarks.emulate.e2e\n",
    "from benchmarks.estimator import accuracy\n",
    "from benchmarks import emulate\n",
    "def f():\n    from benchmarks.emulate.conv import main\n    return main\n",
    "import importlib\nimportlib.import_module('benchmarks.emulate.e2e')\n",
])
def test_the_check_finds_an_import_of_the_benchmarks_wherever_it_is(tmp_path, source):
    module = tmp_path / "product_module.py"
    module.write_text(source)
    assert len(benchmark_imports([module])) == 1


def test_the_check_leaves_other_imports_alone(tmp_path):
    module = tmp_path / "product_module.py"
    module.write_text("import benchmarks_of_mine\nfrom emulate import benchmark_util\n"
                      "'python -m benchmarks.emulate.e2e'\n")
    assert benchmark_imports([module]) == []


def test_loading_the_prediction_path_loads_no_benchmark_module():
    """Imported in a fresh interpreter, the prediction entry modules and the in-step calibration they call pull in
    no ``benchmarks.*`` module (a lazy import would show up only when its function runs: the AST check covers it)."""
    code = (f"import importlib, json, sys\nfor m in {list(ENTRY_MODULES)!r}:\n    importlib.import_module(m)\n"
            "print(json.dumps(sorted(m for m in sys.modules if m == 'benchmarks' or m.startswith('benchmarks.'))))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
