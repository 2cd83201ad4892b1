"""Maps the top-level runtime-side folders under the one import name `etbuild`.

As in ExecuTorch, `runtime/`, `kernels/`, `backends/` and `schema/` sit at the top of the
repository; they install as `etbuild.runtime`, `etbuild.kernels`, `etbuild.backends` and
`etbuild.schema`. Everything else is in pyproject.toml.
"""

from setuptools import find_packages, setup

PACKAGE_DIRS = {
    "etbuild": "etbuild",
    "etbuild.runtime": "runtime",
    "etbuild.kernels": "kernels",
    "etbuild.backends": "backends",
    "etbuild.schema": "schema",
}

packages = []
for package, folder in PACKAGE_DIRS.items():
    packages.append(package)
    packages.extend(f"{package}.{sub}" for sub in find_packages(folder))

setup(packages=packages, package_dir=PACKAGE_DIRS)
