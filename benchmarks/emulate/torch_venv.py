"""Throwaway virtual environments holding one torch release and this checkout, for
``python -m benchmarks.emulate.torch_matrix``.

Each lives in ``<root>/torch-<version>`` (5-8 GB) and is reused while the record inside it (``stepcast-venv.json``)
says it holds that torch, this checkout (editable) and this checkout's dependencies (``pyproject.toml``'s hash).
Installing is four steps, each skipped when already done:

1. ``python -m venv`` with this interpreter;
2. ``pip install torch==X`` (from ``--find-links DIR`` alone first when one is given, then with the index too);
3. ``pip install -e <checkout> transformers>=4.56``, torch kept at X;
4. ``pip install torchvision>=0.21`` (0.21 is torch 2.6's; older ones are pure-Python releases that name no torch):
   pip picks the newest release whose torch requirement X meets; when there is none the environment records why and
   the workloads that need it say so.

Every pip runs with ``PIP_CONSTRAINT`` naming a constraints file that holds ``torch==X``: it keeps torch at X through
steps 3 and 4, and stands in for the machine's own constraint file (this machine's pip configuration caps torch at
2.14.1) in these environments only. The project's own installation is never touched.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from stepcast.profiling.atomic import write_json_atomic
from stepcast.profiling.paths import REPO_ROOT, cache_root

RECORD = "stepcast-venv.json"
EXTRAS = ("transformers>=4.56",)
#: the packages the matrix's workloads may need beyond torch (benchmarks/emulate/compat.py rows' ``requires``; each
#: package's module has its name)
OPTIONAL_PACKAGES = ("transformers", "torchvision")
TORCHVISION = "torchvision>=0.21"
PIP_TIMEOUT_S = 3600.0

Runner = Callable[..., subprocess.CompletedProcess]


class VenvError(RuntimeError):
    """An environment could not be made; the message (one line) says which step failed and pip's reason."""


@dataclass
class Venv:
    """One environment, as its record describes it."""
    version: str                     # the torch release asked for, "2.6.0"
    path: Path
    torch: str = ""                  # torch's own version string, "2.6.0+cu124"
    cuda: str | None = None          # the CUDA version torch was built for, "12.4"
    repo: str = ""                   # the checkout installed (editable)
    deps: str = ""                   # that checkout's pyproject.toml hash
    packages: dict[str, str] = field(default_factory=dict)  # OPTIONAL_PACKAGES -> version installed, "" absent
    notes: dict[str, str] = field(default_factory=dict)     # package -> why it is absent
    extras: list[str] = field(default_factory=list)         # requirements installed by ensure_packages

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"


def default_root() -> Path:
    return cache_root() / "torch_matrix" / "venvs"


def deps_hash(repo: Path = REPO_ROOT) -> str:
    return hashlib.sha256((repo / "pyproject.toml").read_bytes()).hexdigest()[:16]


def read_record(path: Path) -> Venv | None:
    try:
        doc = json.loads((path / RECORD).read_text())
        return Venv(**{**doc, "path": path})
    except (OSError, ValueError, TypeError):
        return None


def write_record(venv: Venv) -> None:
    write_json_atomic(venv.path / RECORD, {k: v for k, v in asdict(venv).items() if k != "path"})


def _last_error(out: str) -> str:
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR:")]
    return (errors[0] if errors else lines[-1] if lines else "no output")[:300]


class Installer:
    """Makes and reuses the environments under ``root``. ``find_links``: a folder of wheels tried first (``{version}``
    in it is replaced by the torch version); ``run``: stands in for ``subprocess.run`` (tests); ``log``: progress."""

    def __init__(self, root: Path | None = None, *, find_links: str | None = None, run: Runner = subprocess.run,
                 log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
                 repo: Path = REPO_ROOT) -> None:
        self.root = Path(root) if root is not None else default_root()
        self.find_links = find_links
        self.run = run
        self.log = log
        self.repo = repo

    def path(self, version: str) -> Path:
        return self.root / f"torch-{version}"

    def ensure(self, version: str) -> Venv:
        """The environment for torch ``version``, made or completed as needed; VenvError when a step fails."""
        path = self.path(version)
        venv = read_record(path) or Venv(version=version, path=path)
        if venv.version == version and venv.repo == str(self.repo) and venv.deps == deps_hash(self.repo) \
                and venv.torch and all(p in venv.packages for p in OPTIONAL_PACKAGES):
            return venv
        venv = Venv(version=version, path=path)
        if not venv.python.exists():
            self.log(f"torch {version}: creating {path}")
            path.parent.mkdir(parents=True, exist_ok=True)
            self._step("python -m venv", [sys.executable, "-m", "venv", str(path)], version)
        if self._installed_torch(venv) != version:
            self.log(f"torch {version}: pip install torch=={version} (a few minutes; 5-8 GB)")
            self._install_torch(venv)
        self.log(f"torch {version}: pip install -e {self.repo} {' '.join(EXTRAS)}")
        self._pip(venv, ["-e", str(self.repo), *EXTRAS], "installing this checkout")
        venv.repo, venv.deps = str(self.repo), deps_hash(self.repo)
        self._torchvision(venv)
        venv.torch, venv.cuda = self._torch_build(venv)
        venv.packages = self._packages(venv)
        write_record(venv)
        return venv

    def ensure_packages(self, version: str, requirements: tuple[str, ...]) -> Venv:
        """The environment for torch ``version`` with ``requirements`` installed too (torch kept at ``version``), for
        workloads that need their own releases of other packages (the published torchtitan rows')."""
        venv = self.ensure(version)
        if set(requirements) <= set(venv.extras):
            return venv
        self.log(f"torch {version}: pip install {' '.join(requirements)}")
        self._pip(venv, list(requirements), f"installing {' '.join(requirements)}")
        venv.extras = sorted(set(venv.extras) | set(requirements))
        write_record(venv)
        return venv

    # -- the steps ----------------------------------------------------------------------------------------------
    def _environment(self, version: str) -> dict[str, str]:
        constraints = self.root / f".constraints-{version}.txt"
        constraints.parent.mkdir(parents=True, exist_ok=True)
        constraints.write_text(f"torch=={version}\n")
        return {**os.environ, "PIP_CONSTRAINT": str(constraints), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}

    def _step(self, what: str, cmd: list[str], version: str) -> subprocess.CompletedProcess:
        done = self.run(cmd, capture_output=True, text=True, env=self._environment(version), timeout=PIP_TIMEOUT_S)
        if done.returncode != 0:
            raise VenvError(f"torch {version}: {what} failed: {_last_error((done.stderr or '') + (done.stdout or ''))}")
        return done

    def _pip(self, venv: Venv, args: list[str], what: str) -> subprocess.CompletedProcess:
        return self._step(what, [str(venv.python), "-m", "pip", "install", "-q", *args], venv.version)

    def _install_torch(self, venv: Venv) -> None:
        spec = f"torch=={venv.version}"
        if self.find_links:
            links = self.find_links.replace("{version}", venv.version)
            try:
                self._pip(venv, ["--no-index", "--find-links", links, spec], f"installing {spec} from {links}")
                return
            except VenvError:
                self.log(f"torch {venv.version}: {links} does not hold it all; trying the index too")
            self._pip(venv, ["--find-links", links, spec], f"installing {spec}")
        else:
            self._pip(venv, [spec], f"installing {spec}")

    def _torchvision(self, venv: Venv) -> None:
        try:
            self._pip(venv, [TORCHVISION], "installing torchvision")
        except VenvError as exc:
            venv.notes["torchvision"] = f"no torchvision release installs with torch {venv.version} ({exc})"
            self.log(f"torch {venv.version}: {venv.notes['torchvision']}")

    def _query(self, venv: Venv, code: str) -> str:
        done = self.run([str(venv.python), "-c", code], capture_output=True, text=True, timeout=300,
                        cwd=str(venv.path))
        return done.stdout.strip() if done.returncode == 0 else ""

    def _installed_torch(self, venv: Venv) -> str:
        """The torch release in the environment ("2.6.0", the local tag dropped), "" when none."""
        found = self._query(venv, "import importlib.metadata as m; print(m.version('torch'))")
        return found.split("+")[0]

    def _torch_build(self, venv: Venv) -> tuple[str, str | None]:
        """torch's version and CUDA strings, from its version.py (as emulate.launcher reads them)."""
        code = ("import importlib.util, pathlib, re; s = importlib.util.find_spec('torch'); "
                "t = (pathlib.Path(s.origin).parent / 'version.py').read_text(); "
                "v = re.search(r\"^__version__(?:: [^=]+)? = '([^']*)'\", t, re.M); "
                "c = re.search(r\"^cuda(?:: [^=]+)? = (?:'([^']*)'|None)\", t, re.M); "
                "print(v.group(1), (c and c.group(1)) or '')")
        found = self._query(venv, code).split()
        if not found:
            raise VenvError(f"torch {venv.version}: torch is not importable in {venv.path}")
        return found[0], (found[1] if len(found) > 1 else None)

    def _packages(self, venv: Venv) -> dict[str, str]:
        code = ("import importlib.metadata as m, json\n"
                "def v(p):\n    try:\n        return m.version(p)\n"
                "    except m.PackageNotFoundError:\n        return ''\n"
                f"print(json.dumps({{p: v(p) for p in {list(OPTIONAL_PACKAGES)!r}}}))")
        try:
            return {p: str(v) for p, v in json.loads(self._query(venv, code) or "{}").items()}
        except ValueError:
            return {p: "" for p in OPTIONAL_PACKAGES}
