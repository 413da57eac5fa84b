"""Every file-system call the state store makes, behind one small interface.

The commit protocol needs only: list a directory, read/write small files, delete trees, and
publish a small file atomically (write a temp file in the same directory, then rename it over
the final name). Spark writes the Parquet directories itself; it gets paths from ``spark_uri``.
A Hadoop-URI implementation (hdfs://, s3a://) is a second class here, chosen by
``filesystem_for``; nothing else in the package touches ``os`` or ``shutil``.
"""
from __future__ import annotations

import os
import shutil
import uuid
from typing import BinaryIO, Protocol


class FileSystem(Protocol):
    """What the state store needs from storage. Paths are strings in the store's own scheme."""

    def join(self, base: str, *parts: str) -> str: ...
    def exists(self, path: str) -> bool: ...
    def listdir(self, path: str) -> list[str]: ...
    def makedirs(self, path: str) -> None: ...
    def read_text(self, path: str) -> str: ...
    def publish_text(self, path: str, text: str, tmp_prefix: str) -> None: ...
    def remove_file(self, path: str) -> None: ...
    def remove_tree(self, path: str) -> None: ...
    def rename(self, src: str, dst: str) -> None: ...
    def data_files(self, path: str) -> list[tuple[str, int]]: ...
    def open_read(self, path: str) -> BinaryIO: ...
    def sync_tree(self, path: str) -> None: ...
    def spark_uri(self, path: str) -> str: ...
    def normalize(self, root: str) -> str: ...


def _is_data_file(name: str) -> bool:
    """Spark's rule: names starting with '_' or '.' (_SUCCESS, .crc) are not data."""
    return not name.startswith(("_", "."))


class LocalFileSystem:
    """POSIX paths. Atomic publish = fsync(temp) + os.replace + fsync(directory)."""

    def join(self, base: str, *parts: str) -> str:
        return os.path.join(base, *parts)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def listdir(self, path: str) -> list[str]:
        """Sorted names in ``path``; empty if it does not exist."""
        try:
            return sorted(os.listdir(path))
        except FileNotFoundError:
            return []

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def read_text(self, path: str) -> str:
        with open(path, encoding="utf-8") as fh:
            return fh.read()

    def publish_text(self, path: str, text: str, tmp_prefix: str) -> None:
        """Make ``path`` hold ``text`` all at once: readers see the old state or the new one."""
        directory = os.path.dirname(path)
        self.makedirs(directory)
        tmp = os.path.join(directory, f"{tmp_prefix}{os.path.basename(path)}.{uuid.uuid4().hex[:8]}")
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.remove(tmp)
            raise
        self._fsync_dir(directory)

    def remove_file(self, path: str) -> None:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass

    def remove_tree(self, path: str) -> None:
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=False)
        else:
            self.remove_file(path)

    def rename(self, src: str, dst: str) -> None:
        """Move a file or directory (parents of ``dst`` are created)."""
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        os.rename(src, dst)

    def data_files(self, path: str) -> list[tuple[str, int]]:
        """(full path, size) of the data files Spark wrote in a Parquet directory."""
        out = []
        for name in self.listdir(path):
            full = os.path.join(path, name)
            if _is_data_file(name) and os.path.isfile(full):
                out.append((full, os.path.getsize(full)))
        return out

    def open_read(self, path: str) -> BinaryIO:
        return open(path, "rb")

    def sync_tree(self, path: str) -> None:
        """fsync files Spark wrote (Spark does not), so a durable manifest never points at
        data lost in a power cut."""
        for dirpath, _dirs, files in os.walk(path):
            for name in files:
                fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            self._fsync_dir(dirpath)

    def spark_uri(self, path: str) -> str:
        """An explicit file: URI, so a cluster whose default FS is HDFS still writes here."""
        return "file://" + os.path.abspath(path)

    def normalize(self, root: str) -> str:
        """An absolute plain path (a file:// prefix is dropped)."""
        if root.startswith("file://"):
            root = root[len("file://"):]
        return os.path.abspath(root)

    @staticmethod
    def _fsync_dir(path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class UnsupportedFileSystem(NotImplementedError):
    """A state root on a file system the commit protocol has no implementation for (yet)."""


def filesystem_for(root: str) -> FileSystem:
    """Pick the implementation from the root's scheme (plain paths and file:// are local)."""
    if root.startswith("file://"):
        return LocalFileSystem()
    if "://" in root:
        scheme = root.split("://", 1)[0]
        raise UnsupportedFileSystem(
            f"state root {root!r}: no {scheme}:// file system yet; add one to "
            "spark_jobs/state/fs.py (it needs list, read, delete and an atomic rename)")
    return LocalFileSystem()

