"""The package list for setuptools; everything else is in pyproject.toml.

The code is every package under rmsnorm_repro/. The repository's top-level configs/ and
results/paper/ (users read and edit them there) ship inside the package as rmsnorm_repro.configs and
rmsnorm_repro.paper, each folder a package of data files, so a regular (non-editable) install has
them (rmsnorm_repro/paths.py finds either copy). Found here, not listed by hand, so a new config
group or task package ships without an edit.
"""
from setuptools import find_namespace_packages, find_packages, setup

DATA_PACKAGES = {"rmsnorm_repro.configs": "configs", "rmsnorm_repro.paper": "results/paper"}

packages = find_packages(include=["rmsnorm_repro", "rmsnorm_repro.*"])
for name, folder in DATA_PACKAGES.items():
    packages += [name, *(f"{name}.{sub}" for sub in find_namespace_packages(folder))]

setup(packages=packages, package_dir=DATA_PACKAGES)
