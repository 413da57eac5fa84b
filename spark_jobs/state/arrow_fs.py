"""Where a path lives for ``pyarrow.fs``, and the state store's file system over it.

Two users: input discovery lists data folders through ``locate`` (no Spark job), and the state
store keeps a remote root through ``ArrowFileSystem``. ``locate`` picks the backend: with a
classic Spark session, the session's own Hadoop file system (spark_jobs/state/hadoop_fs.py: the
connector and configuration Spark writes with); without one (a Spark Connect client), pyarrow's
native clients (s3/s3a, gs, hdfs with libhdfs).

Publishing: HDFS gets write-temp-then-rename (atomic); object stores get one PUT of the whole
file (atomic for readers). Through Hadoop an exclusive publish (a manifest) is atomic too: a
rename that never replaces, or ``create(overwrite=false)``. pyarrow alone has no conditional put,
so there it is check-then-write, and two concurrent writers of one circuit are kept apart by the
DAG's ``max_active_runs=1``, not by the store.
"""
from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from functools import lru_cache
from typing import BinaryIO

import pyarrow.fs as pafs

from spark_jobs.state.hadoop_fs import HADOOP_TYPE_NAME, classic_session, hadoop_filesystem

ARROW_OBJECT_STORES = ("s3", "gcs")  # pyarrow type names whose paths are bucket/key
OBJECT_STORE_SCHEMES = frozenset({"s3", "s3a", "s3n", "gs", "gcs", "oss", "cos", "cosn", "obs", "wasb", "wasbs"})


def strip_file_scheme(path: str) -> str:
    if path.startswith("file://"):
        return path[len("file://"):]
    if path.startswith("file:"):
        return path[len("file:"):]
    return path


def is_local(path: str) -> bool:
    return "://" not in strip_file_scheme(path)


def normalize(path: str) -> str:
    """The identity form of a path: absolute plain path for local files, the URI otherwise."""
    return os.path.abspath(strip_file_scheme(path)) if is_local(path) else path.rstrip("/")


def uri_join(base: str, *parts: str) -> str:
    """``base/part/...`` for URIs (os.path.join is for local paths only)."""
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts if p)])


@lru_cache(maxsize=None)
def _native_fs(scheme: str, authority: str) -> pafs.FileSystem:
    scheme = "s3" if scheme in ("s3a", "s3n") else scheme
    return pafs.FileSystem.from_uri(f"{scheme}://{authority}/")[0]


_HADOOP_CACHE: dict[tuple[int, str, str], pafs.FileSystem] = {}


def remote_fs(scheme: str, authority: str) -> pafs.FileSystem:
    """The Hadoop file system of the running classic Spark session (Spark's own view of the
    store), or pyarrow's native one when there is none (a Spark Connect client, or no Spark)."""
    spark = classic_session()
    if spark is None:
        return _native_fs(scheme, authority)
    key = (id(spark), scheme, authority)
    if key not in _HADOOP_CACHE:
        _HADOOP_CACHE[key] = hadoop_filesystem(spark, f"{scheme}://{authority}/")
    return _HADOOP_CACHE[key]


def is_object_store(uri: str) -> bool:
    """Stores without an atomic rename: a file is published by one whole PUT instead."""
    return "://" in uri and uri.split("://", 1)[0].lower() in OBJECT_STORE_SCHEMES


@dataclass(frozen=True)
class Location:
    """A path as pyarrow sees it (``inner``) and as we report it (``uri``)."""

    fs: pafs.FileSystem
    inner: str
    uri: str

    def outer(self, inner_child: str) -> str:
        return self.uri + inner_child[len(self.inner):]


def locate(path: str) -> Location:
    path = normalize(path)
    if is_local(path):
        return Location(pafs.LocalFileSystem(), path, path)
    scheme, rest = path.split("://", 1)
    authority, _, key = rest.partition("/")
    fs = remote_fs(scheme, authority)
    if fs.type_name in ARROW_OBJECT_STORES:
        inner = rest
    elif fs.type_name == f"py::{HADOOP_TYPE_NAME}":  # the Hadoop handler takes full URIs
        inner = path
    else:
        inner = "/" + key
    return Location(fs, inner.rstrip("/"), path)


class ArrowFileSystem:
    """The ``FileSystem`` protocol (spark_jobs/state/fs.py) over ``pyarrow.fs``; paths are URIs."""

    def join(self, base: str, *parts: str) -> str:
        return uri_join(base, *parts)

    def exists(self, path: str) -> bool:
        loc = locate(path)
        return loc.fs.get_file_info(loc.inner).type != pafs.FileType.NotFound

    def _infos(self, path: str) -> list[pafs.FileInfo]:
        loc = locate(path)
        try:
            return loc.fs.get_file_info(pafs.FileSelector(loc.inner, allow_not_found=True))
        except (NotADirectoryError, FileNotFoundError):
            return []

    def listdir(self, path: str) -> list[str]:
        return sorted(i.base_name for i in self._infos(path))

    def is_link(self, path: str) -> bool:
        """Object stores and HDFS as pyarrow lists them have no symbolic links."""
        return False

    def makedirs(self, path: str) -> None:
        loc = locate(path)
        loc.fs.create_dir(loc.inner, recursive=True)

    def read_text(self, path: str) -> str:
        loc = locate(path)
        with loc.fs.open_input_stream(loc.inner) as fh:
            return fh.read().decode("utf-8")

    def publish_text(self, path: str, text: str, tmp_prefix: str, *, exclusive: bool = False,
                     durable: bool = True) -> None:
        """Make ``path`` hold ``text`` all at once (see the module docstring for how, per store).

        ``exclusive`` (a manifest): the name must not exist. Through Hadoop that is atomic (a
        rename that never replaces, or create(overwrite=false)); pyarrow alone checks first.
        ``durable`` changes nothing here: a remote store acknowledges a write once it is durable.
        """
        loc = locate(path)
        hadoop = getattr(loc.fs, "handler", None)
        if exclusive and not hasattr(hadoop, "rename_new") and self.exists(path):
            raise FileExistsError(f"{path} exists already: another writer committed it")
        data = text.encode("utf-8")
        directory, name = path.rsplit("/", 1)
        self.makedirs(directory)
        if is_object_store(path):
            if exclusive and hasattr(hadoop, "create_new"):
                hadoop.create_new(loc.inner, data)
                return
            with loc.fs.open_output_stream(loc.inner) as out:
                out.write(data)
            return
        tmp = locate(f"{directory}/{tmp_prefix}{name}.{uuid.uuid4().hex[:8]}")
        try:
            with tmp.fs.open_output_stream(tmp.inner) as out:
                out.write(data)
            if exclusive and hasattr(hadoop, "rename_new"):
                hadoop.rename_new(tmp.inner, loc.inner)
            else:
                loc.fs.move(tmp.inner, loc.inner)
        finally:
            if tmp.fs.get_file_info(tmp.inner).type != pafs.FileType.NotFound:
                tmp.fs.delete_file(tmp.inner)

    def remove_file(self, path: str) -> None:
        loc = locate(path)
        if loc.fs.get_file_info(loc.inner).type == pafs.FileType.File:
            loc.fs.delete_file(loc.inner)

    def remove_tree(self, path: str) -> None:
        loc = locate(path)
        kind = loc.fs.get_file_info(loc.inner).type
        if kind == pafs.FileType.Directory:
            loc.fs.delete_dir(loc.inner)
        elif kind == pafs.FileType.File:
            loc.fs.delete_file(loc.inner)

    def rename(self, src: str, dst: str) -> None:
        """Move a file or directory (parents of ``dst`` are created). Atomic on HDFS; a copy on
        object stores, which is safe here because only a later manifest makes ``dst`` visible."""
        self.makedirs(dst.rsplit("/", 1)[0])
        a, b = locate(src), locate(dst)
        a.fs.move(a.inner, b.inner)

    def data_files(self, path: str) -> list[tuple[str, int]]:
        return sorted((uri_join(path, i.base_name), int(i.size)) for i in self._infos(path)
                      if i.type == pafs.FileType.File and not i.base_name.startswith(("_", ".")))

    def open_read(self, path: str) -> BinaryIO:
        loc = locate(path)
        return loc.fs.open_input_file(loc.inner)  # type: ignore[return-value]

    def open_write(self, path: str) -> BinaryIO:
        """A new file (parents created); what an in-process step writes its Parquet files with."""
        self.makedirs(path.rsplit("/", 1)[0])
        loc = locate(path)
        return loc.fs.open_output_stream(loc.inner)  # type: ignore[return-value]

    def sync_tree(self, path: str) -> None:
        """Nothing to do: remote stores acknowledge a write once it is durable."""

    def sync_trees(self, paths) -> None:  # noqa: ANN001 - a sequence of paths
        """Nothing to do (``sync_tree``)."""

    def spark_uri(self, path: str) -> str:
        return path

    def normalize(self, root: str) -> str:
        return root.rstrip("/")
