"""Where the wheel's files come from: the source tree keeps one top-level folder per part of the project
(profiling/, estimator/, emulate/, conf/, models/, examples/), and the wheel installs them all under the one name
``stepcast`` (stepcast/__init__.py says why). Everything else about the package is in pyproject.toml."""
from setuptools import find_packages, setup

#: the top-level folders that become ``stepcast.<name>``, with the data files each carries (beyond its modules)
PARTS: dict[str, list[str]] = {
    "emulate": ["host_call_costs.json", "driver/csrc/*.c", "driver/csrc/*.h", "driver/csrc/*.cpp",
                "driver/csrc/compat/*.h", "driver/csrc/compat/crt/*.h"],
    "estimator": [],
    "profiling": ["*.sh"],
    "conf": ["**/*.yaml"],        # the hardware catalog and the Hydra configs
    "models": ["**/*"],           # the shipped estimator bundles
    "examples": ["**/*.py"],      # the scripts the README and the search configs run
}
CODE = ("emulate", "estimator", "profiling")

packages = ["stepcast", *(f"stepcast.{name}" for name in PARTS if name not in CODE)]
packages += [f"stepcast.{name}" for name in find_packages(include=[f"{part}*" for part in CODE])]
setup(
    packages=packages,
    package_dir={"stepcast": "stepcast", **{f"stepcast.{name}": name for name in PARTS}},
    package_data={f"stepcast.{name}": globs for name, globs in PARTS.items() if globs},
)
