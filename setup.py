"""The package list, found rather than written down (a new subpackage installs without an edit).

setuptools' finder names a package after its folder, so ``[tool.setuptools.packages.find]`` in
pyproject.toml cannot find tasks/, model_adapters/ and leaderboards/: they sit at the top of the repository
(the design card) but install as nfeval.tasks, nfeval.model_adapters and nfeval.leaderboards, where their
import names cannot collide with other distributions. Everything else is in pyproject.toml.
"""

from setuptools import find_namespace_packages, setup

MOVED = {f"nfeval.{folder}": folder for folder in ("tasks", "model_adapters", "leaderboards")}

packages = find_namespace_packages(include=["nfeval", "nfeval.*"])
for name, folder in MOVED.items():
    packages += [name, *(f"{name}.{sub}" for sub in find_namespace_packages(where=folder))]

setup(packages=packages, package_dir=MOVED)
