"""Packaging that pyproject.toml cannot say: the drop-in's ``.pth`` file at site-packages' top.

The file holds one line that Python runs at start-up: it reads one environment variable and,
only when ``HOROVOD_PRAGUE_STRATEGY`` is set, installs ``horovod_prague.common.import_hook``.
"""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

HOOK = "horovod_prague_dropin.pth"


class BuildPyWithHook(build_py):
    def run(self) -> None:
        super().run()
        self.copy_file(HOOK, os.path.join(self.build_lib, HOOK), preserve_mode=False)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, HOOK)]


setup(cmdclass={"build_py": BuildPyWithHook})
