"""Storage beside Spark: every file wmobs reads or writes next to a query (the checkpoint's
offsets log and metadata, substream state, dead letters), on the filesystems checkpoints live on.

Built on fsspec, the filesystem layer the Python data stack shares (pandas, Dask, pyarrow's
datasets all accept it), with its maintained back ends as extras: s3fs (``wmobs[s3]``), adlfs
(``wmobs[azure]``), gcsfs (``wmobs[gcs]``). pyarrow's own filesystems were not enough: they
reject ``s3a://``, ``wasbs://`` and ``dbfs:/``, and take no per-call credentials or endpoint.

URIs as Spark users write them:

=====================================================  ==========================  ===============
URI                                                    back end                    extra
=====================================================  ==========================  ===============
``/path``, ``file:/path``, ``file:///path``            local                       -
``s3://b/k``, ``s3a://b/k``, ``s3n://b/k``             s3fs (bucket ``b``)         ``wmobs[s3]``
``gs://b/k``, ``gcs://b/k``                            gcsfs                       ``wmobs[gcs]``
``abfs[s]://c@acct.dfs.core.windows.net/k``            adlfs (container ``c``)     ``wmobs[azure]``
``wasb[s]://c@acct.blob.core.windows.net/k``, ``az://``  adlfs                     ``wmobs[azure]``
``hdfs://nn:port/k``                                   pyarrow's HDFS (libhdfs)    -
``dbfs:/k`` (Databricks)                               ``/dbfs/k`` (the FUSE path)  -
``dbfs:/Volumes/...``, ``/Volumes/...``                ``/Volumes/...`` (FUSE)      -
=====================================================  ==========================  ===============

Credentials and endpoints come from the environment as each back end reads it (``AWS_*`` and
``AWS_ENDPOINT_URL`` for S3, ``AZURE_STORAGE_*`` for Azure, Google's application default
credentials), or from :class:`Storage` (``options`` passed to the filesystem, or a ready
``filesystem``).

Object stores have no atomic rename. A file wmobs writes (a substream state version, a
dead-letter part) is therefore written as **one PUT of the whole object**
(:meth:`Storage.write_once`): a reader sees all of it or nothing, and a retried task's second
PUT replaces the first whole. On local and HDFS paths, where rename is atomic, it is written
under a temporary name and renamed.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, NamedTuple
from urllib.parse import urlsplit

__all__ = ["Entry", "Location", "Storage", "StorageError"]

DEFAULT_OPTION = ""
"""A :class:`Storage` as a data source option (:meth:`Storage.encode`): the default one."""


class StorageError(ValueError):
    """A location wmobs cannot use: unknown scheme, missing extra, missing bucket, no access."""


class _Scheme(NamedTuple):
    protocol: str
    extra: str | None
    object_store: bool


_SCHEMES: dict[str, _Scheme] = {
    "file": _Scheme("file", None, False),
    "s3": _Scheme("s3", "s3", True),
    "s3a": _Scheme("s3", "s3", True),
    "s3n": _Scheme("s3", "s3", True),
    "gs": _Scheme("gcs", "gcs", True),
    "gcs": _Scheme("gcs", "gcs", True),
    "abfs": _Scheme("abfs", "azure", True),
    "abfss": _Scheme("abfs", "azure", True),
    "az": _Scheme("abfs", "azure", True),
    "wasb": _Scheme("abfs", "azure", True),
    "wasbs": _Scheme("abfs", "azure", True),
    "hdfs": _Scheme("hdfs", None, False),
}
_PACKAGES = {"s3": "s3fs", "gcs": "gcsfs", "abfs": "adlfs"}


class Entry(NamedTuple):
    """One file (or folder) of a listing."""

    name: str
    """The base name."""
    mtime: datetime | None
    folder: bool = False
    """A directory (a common prefix on an object store)."""


@dataclass(frozen=True)
class Location:
    """A URI resolved: the filesystem, the path inside it, what it is."""

    filesystem: Any
    path: str
    uri: str
    object_store: bool
    anchor: str
    """What must exist before wmobs writes below it: the bucket or container of an object
    store; ``""`` on local and HDFS paths (directories are created)."""

    def child(self, name: str) -> Location:
        return Location(
            self.filesystem,
            f"{self.path.rstrip('/')}/{name}",
            f"{self.uri.rstrip('/')}/{name}",
            self.object_store,
            self.anchor,
        )


def _local_path(uri: str) -> str:
    if uri.startswith("dbfs:"):
        rest = "/" + uri[len("dbfs:") :].lstrip("/")
        return rest if rest.startswith("/Volumes/") else "/dbfs" + rest
    if uri.startswith("file:"):
        rest = uri[len("file:") :]
        if rest.startswith("//"):
            rest = urlsplit(uri).path
        return os.path.abspath(rest)
    return os.path.abspath(uri)


@dataclass(frozen=True)
class Storage:
    """How wmobs reaches files beside Spark, for what a URI cannot say.

    ``options``: keyword arguments for the filesystem of the URI's scheme (fsspec's storage
    options), e.g. ``{"endpoint_url": "http://127.0.0.1:9000", "key": ..., "secret": ...}``
    for S3, ``{"connection_string": ...}`` or ``{"account_key": ...}`` for Azure.
    ``filesystem``: an fsspec filesystem to use as it is, for any URI of its protocol.
    Both are pickled into the executors' tasks (keep them small; prefer credentials from the
    environment where the cluster provides them).
    """

    options: Mapping[str, Any] = field(default_factory=dict)
    filesystem: Any = None

    @classmethod
    def of(cls, value: Storage | Mapping[str, Any] | None) -> Storage:
        if value is None:
            return cls()
        if isinstance(value, Storage):
            return value
        if isinstance(value, Mapping):
            return cls(options=dict(value))
        raise TypeError(f"storage: expected wmobs.Storage or a dict, got {type(value).__name__}")

    def encode(self) -> str:
        """This storage as a string, for a data source option (the default: ``""``)."""
        if self == Storage():
            return DEFAULT_OPTION
        import base64
        import pickle

        return base64.b64encode(pickle.dumps(self)).decode("ascii")

    @classmethod
    def decode(cls, text: str) -> Storage:
        """The storage :meth:`encode` gave ``text`` for."""
        if not text:
            return cls()
        import base64
        import pickle

        storage = pickle.loads(base64.b64decode(text))
        assert isinstance(storage, Storage)
        return storage

    # ---- resolving ----------------------------------------------------------------------

    def resolve(self, uri: str) -> Location:
        """The filesystem and path of ``uri``; :class:`StorageError` naming the scheme and the
        extra to install when wmobs cannot reach it."""
        scheme = urlsplit(uri).scheme.lower() if "://" in uri or uri.startswith("dbfs:") else ""
        if len(scheme) == 1:  # a Windows drive letter
            scheme = ""
        if scheme in ("", "dbfs", "file"):
            return Location(self._filesystem("file"), _local_path(uri), uri, False, "")
        known = _SCHEMES.get(scheme)
        if known is None:
            raise StorageError(
                f"{uri}: wmobs does not know the scheme {scheme!r}; it knows "
                f"{', '.join(s + '://' for s in sorted(_SCHEMES))}, dbfs:/ and local paths. "
                "Pass wmobs.Storage(filesystem=...) with an fsspec filesystem for others."
            )
        parts = urlsplit(uri)
        if known.protocol == "hdfs":
            return Location(self._filesystem("hdfs", uri=uri), parts.path or "/", uri, False, "")
        options: dict[str, Any] = {}
        host = parts.netloc
        if known.protocol == "abfs":
            container, _, account_host = host.partition("@")
            if account_host and "account_name" not in self.options:
                options["account_name"] = account_host.split(".", 1)[0]
            host = container
        if not host:
            raise StorageError(f"{uri}: no bucket or container in the URI")
        path = f"{host}/{parts.path.lstrip('/')}".rstrip("/")
        return Location(self._filesystem(known.protocol, **options), path, uri, True, host)

    def _filesystem(self, protocol: str, uri: str | None = None, **extra: Any) -> Any:
        if self.filesystem is not None and protocol in _protocols(self.filesystem):
            return self.filesystem
        try:
            import fsspec
        except ImportError as exc:  # pragma: no cover - fsspec comes with wmobs[spark]
            raise StorageError("wmobs' storage layer needs fsspec: pip install fsspec") from exc
        if protocol == "hdfs":
            return _hdfs(uri or "", self.options)
        options = {**self.options, **extra} if protocol != "file" else {}
        try:
            return fsspec.filesystem(protocol, **options)
        except ImportError as exc:
            extra_name = _SCHEMES[_first_scheme(protocol)].extra
            raise StorageError(
                f"wmobs needs {_PACKAGES.get(protocol, protocol)} for {protocol}:// paths: "
                f"pip install 'wmobs[{extra_name}]' ({exc})"
            ) from exc

    # ---- reading and writing --------------------------------------------------------------

    def read_bytes(self, uri: str | Location) -> bytes:
        where = uri if isinstance(uri, Location) else self.resolve(uri)
        data: bytes = where.filesystem.cat_file(where.path)
        return data

    def read_text(self, uri: str | Location) -> str:
        return self.read_bytes(uri).decode("utf-8")

    def write_once(self, uri: str | Location, data: bytes) -> None:
        """Write ``data`` as the whole of ``uri``, at once: one PUT on an object store, a
        temporary file then a rename elsewhere. A reader never sees part of it."""
        where = uri if isinstance(uri, Location) else self.resolve(uri)
        fs = where.filesystem
        if where.object_store:
            fs.pipe_file(where.path, data)
            return
        folder, _, name = where.path.rpartition("/")
        fs.makedirs(folder or "/", exist_ok=True)
        temp = f"{folder}/.{name}.{uuid.uuid4().hex}.tmp"
        try:  # a write that fails part way (a full disk) leaves no temporary file either
            fs.pipe_file(temp, data)
            fs.mv(temp, where.path)
        except BaseException:
            with contextlib.suppress(Exception):
                fs.rm_file(temp)
            raise

    def _listing(self, uri: str | Location) -> list[dict[str, Any]]:
        where = uri if isinstance(uri, Location) else self.resolve(uri)
        # Object stores' clients keep listings (fsspec's dircache) for the life of the worker:
        # another process's newer files would go unseen.
        where.filesystem.invalidate_cache(where.path)
        try:
            infos: list[dict[str, Any]] = where.filesystem.ls(where.path, detail=True)
        except FileNotFoundError:
            return []
        return infos

    def files(self, uri: str | Location) -> list[Entry]:
        """The files directly below ``uri`` (none if it does not exist)."""
        return [e for e in self.entries(uri) if not e.folder]

    def entries(self, uri: str | Location) -> list[Entry]:
        """The files and folders directly below ``uri``, in one listing (none if it does not
        exist)."""
        return [
            Entry(_base_name(info), _mtime(info), info.get("type") == "directory")
            for info in self._listing(uri)
        ]

    def delete(self, uri: str | Location) -> None:
        """Remove a file; one that is already gone is fine."""
        where = uri if isinstance(uri, Location) else self.resolve(uri)
        with contextlib.suppress(FileNotFoundError):
            where.filesystem.rm_file(where.path)

    def remove_empty_folder(self, uri: str | Location) -> None:
        """Remove a local folder if it is empty. (An object store has no empty folders: a
        prefix goes with its last object. HDFS's client removes folders whole: left alone.)"""
        where = uri if isinstance(uri, Location) else self.resolve(uri)
        if "file" not in _protocols(where.filesystem):
            return
        with contextlib.suppress(OSError):  # not empty, or gone
            where.filesystem.rmdir(where.path)

    # ---- checking, on the driver ------------------------------------------------------------

    def check(self, uri: str, argument: str) -> Location:
        """Fail fast, on the driver: ``uri`` resolves, and what must exist to write below it
        (an object store's bucket or container) exists and can be read with the credentials
        found. Raises :class:`StorageError` naming ``argument`` and the cause."""
        try:
            where = self.resolve(uri)
        except StorageError as exc:
            raise StorageError(f"{argument}: {exc}") from exc
        if not where.object_store:
            return where
        fs = where.filesystem
        try:
            fs.invalidate_cache()
            try:
                fs.ls(where.path, detail=False)
                return where
            except FileNotFoundError:
                pass  # nothing written there yet: Spark and wmobs create it, in a bucket
            try:
                fs.ls(where.anchor, detail=False)
            except FileNotFoundError:
                raise StorageError(
                    f"{argument}: {uri}: the bucket or container {where.anchor!r} does not "
                    "exist (or these credentials cannot see it)"
                ) from None
        except StorageError:
            raise
        except Exception as exc:
            raise StorageError(
                f"{argument}: cannot read {uri} ({type(exc).__name__}: {exc}). Check the "
                "credentials in the environment, or pass wmobs.Storage(options=...)"
            ) from exc
        return where

    def check_writable(self, uri: str, argument: str) -> None:
        """:meth:`check`, and a file can be written below ``uri`` (created, with the folder if it
        is not there, then both deleted): a folder that cannot be created or written to is a
        :class:`StorageError` naming ``argument``, ``uri`` and the cause, now rather than at
        the first write, maybe days later."""
        where = self.check(uri, argument)
        fs = where.filesystem
        probe = f"{where.path.rstrip('/')}/.wmobs-probe-{uuid.uuid4().hex}"
        try:
            created = not where.object_store and not fs.exists(where.path)
            if created:
                fs.makedirs(where.path, exist_ok=True)
            fs.pipe_file(probe, b"")
            fs.rm_file(probe)
            if created:  # left as it was: the first write creates it
                fs.rmdir(where.path)
        except Exception as exc:
            raise StorageError(
                f"{argument}: cannot write to {uri} ({type(exc).__name__}: {exc})"
            ) from exc


def _base_name(info: Mapping[str, Any]) -> str:
    return str(info["name"]).rstrip("/").rsplit("/", 1)[-1]


def _protocols(filesystem: Any) -> tuple[str, ...]:
    protocol = getattr(filesystem, "protocol", ())
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)


def _first_scheme(protocol: str) -> str:
    return next(s for s, known in _SCHEMES.items() if known.protocol == protocol)


def _hdfs(uri: str, options: Mapping[str, Any]) -> Any:
    from fsspec.implementations.arrow import HadoopFileSystem

    parts = urlsplit(uri)
    try:
        return HadoopFileSystem(
            host=parts.hostname or "default", port=parts.port or 0, **dict(options)
        )
    except OSError as exc:
        raise StorageError(
            f"{uri}: pyarrow's HDFS client could not start ({exc}); it needs libhdfs and "
            "HADOOP_HOME / CLASSPATH as on a Hadoop node"
        ) from exc


def _mtime(info: Mapping[str, Any]) -> datetime | None:
    for key in ("mtime", "LastModified", "last_modified", "updated", "modificationTime"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, datetime):
            return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        if isinstance(value, (int, float)):
            seconds = value / 1000 if key == "modificationTime" else value
            return datetime.fromtimestamp(seconds, tz=timezone.utc)
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                return datetime.fromisoformat(value.replace("Z", "+00:00"))
    return None
