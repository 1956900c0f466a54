"""Paths as Spark users write them, resolved to a pyarrow filesystem (executor side)."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["filesystem_for"]


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
