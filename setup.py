"""Maps the four code folders into the one ``tdsl`` namespace.

``find_packages`` per folder, so a new subpackage cannot silently miss the wheel
while an editable install still sees it.
"""
from setuptools import find_packages, setup

ROOTS = {"tdsl": "tdsl", "tdsl.schedule": "schedule", "tdsl.autotune": "autotune",
         "tdsl.backends": "backends"}

packages, package_dir = [], {}
for pkg, folder in ROOTS.items():
    packages.append(pkg)
    package_dir[pkg] = folder
    for sub in find_packages(folder):
        packages.append(f"{pkg}.{sub}")
        package_dir[f"{pkg}.{sub}"] = f"{folder}/{sub.replace('.', '/')}"

setup(packages=packages, package_dir=package_dir,
      package_data={"tdsl": ["py.typed"], "tdsl.backends": ["cuda/*.h", "cuda/*.cc"]})
