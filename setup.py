"""Build hook (the project's metadata is in pyproject.toml): a wheel carries the builders' assets.

The assets live in the top-level ``builders/<name>/`` of the tree; ``build_py`` copies them into
the wheel as ``nvkr/_assets/<name>/`` (modes kept: the hooks are executable), where
:func:`nvkr.builders.assets.asset_dir` finds them in an installed nvkr.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithAssets(build_py):  # type: ignore[misc]
    def run(self) -> None:
        super().run()
        assets = Path(__file__).resolve().parent / "builders"
        dest = Path(self.build_lib) / "nvkr" / "_assets"
        shutil.rmtree(dest, ignore_errors=True)  # a build dir kept from an earlier build
        shutil.copytree(
            assets,
            dest,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )


setup(cmdclass={"build_py": BuildPyWithAssets})
