"""stepcast: the step time and peak memory of unmodified PyTorch training scripts on GPUs you do not have.

Installed, everything lives under this one name, so nothing generic (``profiling``, ``datasets``) lands beside the
user's own modules: ``stepcast.emulate`` (the virtual GPU and the simulator), ``stepcast.estimator`` (kernel-runtime
models), ``stepcast.profiling`` (kernel measurements), and the data they ship, ``stepcast.conf`` (hardware catalog,
Hydra configs), ``stepcast.models`` (the estimator bundles) and ``stepcast.examples``. The source tree keeps those
as top-level folders (pyproject.toml maps them into this package when a wheel is built); run from a checkout, this
package's path takes the checkout's root as well, so the same names import there without installing anything.
This package's own modules parse the command line (:mod:`stepcast.cli`), declare every setting
(:mod:`stepcast.settings`) and every user error (:mod:`stepcast.errors`)."""
from pathlib import Path as _Path

_root = _Path(__file__).resolve().parent.parent
#: the source checkout this package runs from, or None when installed (the one test of which it is)
_in_checkout = (_root / "pyproject.toml").is_file() and (_root / "emulate" / "__init__.py").is_file()
CHECKOUT: _Path | None = _root if _in_checkout else None
if CHECKOUT is not None:
    __path__.append(str(CHECKOUT))  # noqa: F821 (a package's __path__): stepcast.emulate is the checkout's emulate/
