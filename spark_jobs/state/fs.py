"""Every file-system call the state store makes, behind one small interface.

The commit protocol needs only: list a directory, read/write small files, delete trees, and
publish a small file atomically (write a temp file in the same directory, then rename it over
the final name; or one whole PUT on an object store). Spark writes the Parquet directories
itself; it gets paths from ``spark_uri``. ``filesystem_for`` picks the implementation from the
root: ``LocalFileSystem`` for paths and file:// URIs, ``ArrowFileSystem`` (spark_jobs/state/
arrow_fs.py) for every other URI, backed by the Spark session's own Hadoop file system
(hdfs://, s3a://, abfs://, gs://, viewfs://: spark_jobs/state/hadoop_fs.py) or, for a Spark
Connect client, by pyarrow's native one.
"""
from __future__ import annotations

import os
import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import BinaryIO, Protocol, Sequence

from spark_jobs.state.arrow_fs import ArrowFileSystem, is_local, normalize
from spark_jobs.state.space import NO_SPACE_ERRNOS

SYNC_THREADS = 16  # files and folders of one commit flushed at once (each thread mostly waits)


class FileSystem(Protocol):
    """What the state store needs from storage. Paths are strings in the store's own scheme."""

    def join(self, base: str, *parts: str) -> str: ...
    def exists(self, path: str) -> bool: ...
    def listdir(self, path: str) -> list[str]: ...
    def is_link(self, path: str) -> bool: ...
    def makedirs(self, path: str) -> None: ...
    def read_text(self, path: str) -> str: ...
    def publish_text(self, path: str, text: str, tmp_prefix: str, *, exclusive: bool = False,
                     durable: bool = True) -> None: ...
    def remove_file(self, path: str) -> None: ...
    def remove_tree(self, path: str) -> None: ...
    def rename(self, src: str, dst: str) -> None: ...
    def data_files(self, path: str) -> list[tuple[str, int]]: ...
    def open_read(self, path: str) -> BinaryIO: ...
    def open_write(self, path: str) -> BinaryIO: ...
    def sync_tree(self, path: str) -> None: ...
    def sync_trees(self, paths: Sequence[str]) -> None: ...
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

    def is_link(self, path: str) -> bool:
        """A symbolic link: the store never lists or deletes through one (it is not its own)."""
        return os.path.islink(path)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def read_text(self, path: str) -> str:
        with open(path, encoding="utf-8") as fh:
            return fh.read()

    def publish_text(self, path: str, text: str, tmp_prefix: str, *, exclusive: bool = False,
                     durable: bool = True) -> None:
        """Make ``path`` hold ``text`` all at once: readers see the old state or the new one.

        ``exclusive``: the name must not exist yet (a manifest); link() refuses atomically.
        ``durable``: fsync the file and its directory (a manifest, a lease); without, a page
        derived from durable files (a report index) is still replaced atomically but may be lost
        in a power cut, which saves two disk flushes.
        """
        directory = os.path.dirname(path)
        self.makedirs(directory)
        tmp = os.path.join(directory, f"{tmp_prefix}{os.path.basename(path)}.{uuid.uuid4().hex[:8]}")
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(text)
                if durable:
                    fh.flush()
                    os.fsync(fh.fileno())
            if exclusive:
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    raise FileExistsError(f"{path} exists already: another writer committed it") from None
                os.remove(tmp)
            else:
                os.replace(tmp, path)
        except BaseException as exc:
            if os.path.exists(tmp):
                os.remove(tmp)
            if isinstance(exc, OSError) and exc.errno in NO_SPACE_ERRNOS and not exc.filename:
                raise OSError(exc.errno, exc.strerror, path) from None  # say which file did not fit
            raise
        if durable:
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

    def open_write(self, path: str) -> BinaryIO:
        """A new file (parents created; never replacing one): how an in-process step writes."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return open(path, "xb")

    def sync_tree(self, path: str) -> None:
        """fsync files Spark wrote (Spark does not), so a durable manifest never points at
        data lost in a power cut."""
        self.sync_trees([path])

    def sync_trees(self, paths: Sequence[str]) -> None:
        """``sync_tree`` of several trees (a commit's new directories), their files and folders
        flushed concurrently: the file system's journal then commits many flushes at once, where
        one after the other each waited for its own (a step writes a dozen small directories)."""
        targets: list[str] = []
        for path in paths:
            for dirpath, _dirs, files in os.walk(path):
                targets.extend(os.path.join(dirpath, name) for name in files)
                targets.append(dirpath)
        if len(targets) <= 2:
            for target in targets:
                self._fsync_path(target)
            return
        with ThreadPoolExecutor(max_workers=min(SYNC_THREADS, len(targets))) as pool:
            for _ in pool.map(self._fsync_path, targets):
                pass

    @staticmethod
    def _fsync_path(path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def spark_uri(self, path: str) -> str:
        """An explicit file: URI, so a cluster whose default FS is HDFS still writes here."""
        return "file://" + os.path.abspath(path)

    def normalize(self, root: str) -> str:
        """An absolute plain path (a file: prefix is dropped)."""
        return normalize(root)

    _fsync_dir = _fsync_path


def sidecars_apply(fs: object) -> bool:
    """Does a sidecar (a file's statistics, ``stats_sidecar``; an integral's digests,
    ``bag_index``) apply to this store? Local stores only: sidecars are memory-mapped, and a
    remote store's files are read from their footers and checked exactly."""
    return isinstance(fs, LocalFileSystem)


def filesystem_for(root: str) -> FileSystem:
    """Pick the implementation from the root's scheme (plain paths and file:// are local)."""
    return LocalFileSystem() if is_local(root) else ArrowFileSystem()
