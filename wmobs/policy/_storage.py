"""Paths as Spark users write them, resolved to a pyarrow filesystem (executor side)."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["filesystem_for", "read_text"]


def filesystem_for(path: str) -> tuple[Any, str]:
    """``(pyarrow filesystem, path inside it)`` for a local path, a ``file:`` path, or any URI
    pyarrow's filesystems know (``file://``, ``hdfs://``, ``s3://``, ``gs://``, ...)."""
    from pyarrow import fs

    if "://" in path:
        filesystem, inner = fs.FileSystem.from_uri(path)
        return filesystem, str(inner)
    if path.startswith("file:"):
        path = path[len("file:") :]
    return fs.LocalFileSystem(), os.path.abspath(path)


def read_text(path: str) -> str:
    """A small UTF-8 file, whole."""
    filesystem, inner = filesystem_for(path)
    with filesystem.open_input_stream(inner) as stream:
        return bytes(stream.read()).decode("utf-8")
