"""Package layout only (metadata lives in pyproject.toml).

The top-level `tasks/` folder is installed as the `mmrlvr.tasks` subpackage (setuptools
`package_dir`): adding a task stays "drop one file in tasks/", and the import name cannot collide
with any other distribution's `tasks` package.
"""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["mmrlvr", "mmrlvr.*"]) + ["mmrlvr.tasks"],
    package_dir={"mmrlvr.tasks": "tasks"},
    # the published model configs `mmrlvr plan` sizes a hub model from (nothing downloaded)
    package_data={"mmrlvr.models": ["configs/*.json"]},
)
