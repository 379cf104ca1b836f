"""Build hooks for tandem-client (the metadata is in pyproject.toml).

The gRPC stubs are not checked in: ``build_py`` generates them from tandem's
``proto/tandem/v1/generation.proto`` (``../../proto`` in a checkout, ``proto/`` in an
sdist) with ``grpcio-tools`` from ``[build-system] requires``, into the build's
``tandem_client/_gen`` (into the source tree for an editable install). ``sdist``
copies the proto into the archive so that it builds on its own.
"""

from __future__ import annotations

import os
import shutil
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import build_stubs  # noqa: E402  (beside this file)


class BuildPyWithStubs(build_py):
    """build_py that also generates tandem_client/_gen from the proto."""

    def run(self) -> None:
        editable = getattr(self, "editable_mode", False)
        if not editable:
            # pip builds in the source tree and reuses build/: start the package afresh
            # so that modules deleted from the source do not linger in the wheel.
            shutil.rmtree(os.path.join(self.build_lib, "tandem_client"), ignore_errors=True)
        super().run()
        if editable:
            out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tandem_client", "_gen")
        else:
            out = os.path.join(self.build_lib, "tandem_client", "_gen")
        self.announce(f"generating gRPC stubs into {out}", level=2)
        build_stubs.generate(out)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = list(super().get_outputs(include_bytecode=include_bytecode))
        gen = os.path.join(self.build_lib, "tandem_client", "_gen")
        for dirpath, _, filenames in os.walk(gen):
            outputs.extend(os.path.join(dirpath, f) for f in filenames)
        return outputs


class SdistWithProtos(sdist):
    """sdist that carries the protos (as proto/) so that the archive builds alone."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        root = build_stubs.find_proto_root()
        for rel in build_stubs.PROTOS:
            dest = os.path.join(base_dir, "proto", rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copyfile(os.path.join(root, rel), dest)


setup(cmdclass={"build_py": BuildPyWithStubs, "sdist": SdistWithProtos})
