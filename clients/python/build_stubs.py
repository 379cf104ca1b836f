#!/usr/bin/env python3
"""Generates tandem_client's gRPC stubs from tandem's public proto.

Used by ``setup.py`` (at build time, into the wheel's ``tandem_client/_gen``) and by
``generate_stubs.sh`` (in place, for working from a checkout)::

    python build_stubs.py --out tandem_client/_gen [--proto-root ../../proto]

It runs ``grpc_tools.protoc`` on ``tandem/v1/generation.proto`` (the public API; the
workers' internal protos are not part of the client), writing ``*_pb2.py``,
``*_pb2.pyi`` and ``*_pb2_grpc.py`` under ``<out>/tandem/v1/``, then rewrites the
generated absolute imports (``from tandem.v1 import generation_pb2``) into relative
ones (``from . import generation_pb2``), so that the stubs live inside
``tandem_client._gen`` without a top-level ``tandem`` package on ``sys.path``. The
new tree is built in a scratch directory and replaces ``<out>`` only on success.

Needs ``grpcio-tools`` (``[build-system] requires`` in pyproject.toml, or the dev
venv from requirements.txt).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

#: The protos the client is generated from, relative to the proto root.
PROTOS = ("tandem/v1/generation.proto",)

HERE = Path(__file__).resolve().parent

# `from tandem.v1 import generation_pb2 as x` -> `from . import generation_pb2 as x`
_IMPORT_RE = re.compile(r"^from tandem\.v1 import ", re.MULTILINE)
# The module name protobuf records in each message class's __module__.
_MODULE_NAME_RE = re.compile(r"'tandem\.v1\.(\w+_pb2)'")


def find_proto_root(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The directory holding ``tandem/v1/generation.proto``.

    ``explicit`` (or ``$TANDEM_PROTO_ROOT``) when given; otherwise ``proto/`` beside
    this file (where an sdist carries a copy), else the repository's ``proto/`` two
    levels up (a checkout: clients/python -> repo root).
    """
    candidates: list[Path]
    chosen = explicit or os.environ.get("TANDEM_PROTO_ROOT")
    if chosen:
        candidates = [Path(chosen)]
    else:
        candidates = [HERE / "proto", HERE.parent.parent / "proto"]
    for root in candidates:
        if all((root / p).is_file() for p in PROTOS):
            return root.resolve()
    tried = ", ".join(str(c) for c in candidates)
    raise FileNotFoundError(f"tandem protos ({', '.join(PROTOS)}) not found under: {tried}")


def _fix_imports(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    new = _IMPORT_RE.sub("from . import ", text)
    if path.suffix == ".py":
        new = _MODULE_NAME_RE.sub(r"__name__", new)
    if new != text:
        path.write_text(new, encoding="utf-8")


def generate(
    out: str | os.PathLike[str], proto_root: str | os.PathLike[str] | None = None
) -> list[Path]:
    """Generates the stubs into ``out`` (replacing it); returns the files written."""
    from grpc_tools import protoc  # imported late: only the build needs it

    root = find_proto_root(proto_root)
    out = Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="._gen.", dir=out.parent))
    try:
        # protoc's own well-known types (google/protobuf/*.proto) ship with grpc_tools.
        builtin = Path(protoc.__file__).resolve().parent / "_proto"
        args = [
            "grpc_tools.protoc",
            f"-I{root}",
            f"-I{builtin}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            *PROTOS,
        ]
        code = protoc.main(args)
        if code != 0:
            raise RuntimeError(f"grpc_tools.protoc failed with exit code {code}: {' '.join(args)}")
        # Regular packages (not namespace ones) down to tandem/v1.
        (tmp / "__init__.py").write_text(
            '"""Generated gRPC stubs of tandem\'s public API (do not edit)."""\n', encoding="utf-8"
        )
        for package in ("tandem", "tandem/v1"):
            (tmp / package / "__init__.py").touch()
        for path in sorted(tmp.rglob("*")):
            if path.suffix in (".py", ".pyi"):
                _fix_imports(path)
        os.chmod(tmp, 0o755)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return sorted(p for p in out.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(HERE / "tandem_client" / "_gen"),
                        help="output directory, replaced on success (default: %(default)s)")
    parser.add_argument("--proto-root", default=None,
                        help="directory holding tandem/v1/*.proto (default: found)")
    args = parser.parse_args(argv)
    try:
        generate(args.out, args.proto_root)
    except (FileNotFoundError, RuntimeError) as err:
        print(f"build_stubs.py: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
