"""Hadoop URIs (hdfs://, s3a://, abfs://, gs://, viewfs://, ...) as a ``pyarrow.fs`` file system.

With a classic Spark session (a JVM in this process), the driver lists, reads and commits through
the JVM's Hadoop ``FileSystem``: exactly the implementation, configuration and credentials
(``spark.hadoop.*``) that Spark writes the Parquet directories with, and any scheme Spark has a
connector for. Wrapping it as a ``pyarrow.fs.FileSystemHandler`` lets input discovery and the
state store (``ArrowFileSystem``) use one code path for every remote store. Paths handed to this
file system are full URIs.
"""
from __future__ import annotations

import io
import sys
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

HADOOP_TYPE_NAME = "hadoop"
# Hadoop's createFile() option: check that nothing is at the path atomically, when the object is
# written (Options.CreateFileOptionKeys.FS_OPTION_CREATE_CONDITIONAL_OVERWRITE).
CONDITIONAL_CREATE = "fs.option.create.conditional.overwrite"


def classic_session() -> "SparkSession | None":
    """The running classic Spark session of this process, if any (Spark Connect has no JVM here)."""
    if "pyspark.sql" not in sys.modules:  # no session without pyspark: do not import it to find out
        return None  # (commands that only read committed state run without it)
    try:
        from pyspark.sql import SparkSession

        session = SparkSession.getActiveSession() or getattr(SparkSession, "_instantiatedSession", None)
        return session if session is not None and getattr(session, "_jvm", None) is not None else None
    except Exception:  # Connect sessions raise on JVM attributes
        return None


def _java_class(exc: BaseException) -> str:
    java = getattr(exc, "java_exception", None)
    return java.getClass().getName() if java is not None else ""


def _not_found(exc: BaseException) -> bool:
    return _java_class(exc).endswith("FileNotFoundException")


class HadoopHandler(pafs.FileSystemHandler):
    """pyarrow's file-system interface over ``org.apache.hadoop.fs.FileSystem`` (via Py4J)."""

    def __init__(self, spark: "SparkSession", uri: str) -> None:
        self._jvm = spark._jvm  # type: ignore[attr-defined]
        conf = spark._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
        self._fs = self._jvm.org.apache.hadoop.fs.Path(uri).getFileSystem(conf)
        self._uri = uri

    def _p(self, path: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(path)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HadoopHandler) and other._uri == self._uri

    def equals(self, other: object) -> bool:
        return self == other

    def get_type_name(self) -> str:
        return HADOOP_TYPE_NAME

    def normalize_path(self, path: str) -> str:
        return path

    @staticmethod
    def _info(path: str, status: Any) -> pafs.FileInfo:
        kind = pafs.FileType.Directory if status.isDirectory() else pafs.FileType.File
        size = None if status.isDirectory() else int(status.getLen())
        return pafs.FileInfo(path, kind, size=size, mtime_ns=int(status.getModificationTime()) * 1_000_000)

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        out = []
        for path in paths:
            try:
                out.append(self._info(path, self._fs.getFileStatus(self._p(path))))
            except Exception as exc:
                if not _not_found(exc):
                    raise
                out.append(pafs.FileInfo(path, pafs.FileType.NotFound))
        return out

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        base = selector.base_dir.rstrip("/")
        try:
            statuses = list(self._fs.listStatus(self._p(base)))
        except Exception as exc:
            if _not_found(exc) and selector.allow_not_found:
                return []
            if _not_found(exc):
                raise FileNotFoundError(base) from exc
            raise
        out = []
        for s in statuses:
            info = self._info(f"{base}/{s.getPath().getName()}", s)
            out.append(info)
            if selector.recursive and info.type == pafs.FileType.Directory:
                out.extend(self.get_file_info_selector(pafs.FileSelector(info.path, recursive=True)))
        return out

    def create_dir(self, path: str, recursive: bool) -> None:
        self._fs.mkdirs(self._p(path))

    def delete_dir(self, path: str) -> None:
        self._fs.delete(self._p(path), True)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        for info in self.get_file_info_selector(pafs.FileSelector(path, allow_not_found=missing_dir_ok)):
            self._fs.delete(self._p(info.path), True)

    def delete_root_dir_contents(self) -> None:
        raise PermissionError("refusing to empty the root of a Hadoop file system")

    def delete_file(self, path: str) -> None:
        self._fs.delete(self._p(path), False)

    def move(self, src: str, dest: str) -> None:
        """Hadoop's rename: atomic on HDFS; it does not replace, so an existing ``dest`` goes first."""
        if self._fs.exists(self._p(dest)):
            self._fs.delete(self._p(dest), False)
        if not self._fs.rename(self._p(src), self._p(dest)):
            raise OSError(f"rename {src} -> {dest} failed")

    def rename_new(self, src: str, dest: str) -> None:
        """Rename that never replaces: HDFS refuses atomically when ``dest`` exists.

        A local file system under Hadoop (RawLocalFileSystem, which the session uses for file
        names with ':') renames with POSIX rename(2), which replaces: check first there too.
        """
        if self._fs.exists(self._p(dest)):
            raise FileExistsError(f"{dest} exists already: another writer committed it")
        if not self._fs.rename(self._p(src), self._p(dest)):
            if self._fs.exists(self._p(dest)):
                raise FileExistsError(f"{dest} exists already: another writer committed it")
            raise OSError(f"rename {src} -> {dest} failed")

    def create_new(self, path: str, data: bytes) -> None:
        """One whole write that fails if ``path`` exists (a manifest, a lease), for object stores.

        Hadoop's ``createFile`` builder with overwrite off and the conditional-create option
        (Hadoop 3.5): S3A then publishes the object in ``close()`` with one PUT carrying
        ``If-None-Match: *``, which the store refuses atomically when the name exists (a check
        before the write alone would let two writers both win). A file system that does not
        know the option ignores it and checks at create time.
        """
        try:
            builder = (self._fs.createFile(self._p(path)).recursive().overwrite(False)
                       .opt(CONDITIONAL_CREATE, True))
            with _JavaOutput(builder.build()) as out:  # the conditional PUT happens in close()
                out.write(data)
        except Exception as exc:
            if _java_class(exc).endswith(("FileAlreadyExistsException", "RemoteFileChangedException")):
                raise FileExistsError(f"{path} exists already: another writer committed it") from exc
            raise

    def copy_file(self, src: str, dest: str) -> None:
        with self.open_input_stream(src) as fin, self.open_output_stream(dest, None) as fout:
            fout.write(fin.read())

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return self.open_input_file(path)

    def open_input_file(self, path: str) -> pa.NativeFile:
        try:
            size = int(self._fs.getFileStatus(self._p(path)).getLen())
        except Exception as exc:
            if _not_found(exc):
                raise FileNotFoundError(path) from exc
            raise
        return pa.PythonFile(_JavaInput(self._jvm, self._fs.open(self._p(path)), size), mode="r")

    def open_output_stream(self, path: str, metadata: Any) -> pa.NativeFile:
        return pa.PythonFile(_JavaOutput(self._fs.create(self._p(path), True)), mode="w")

    def open_append_stream(self, path: str, metadata: Any) -> pa.NativeFile:
        return pa.PythonFile(_JavaOutput(self._fs.append(self._p(path))), mode="w")


class _JavaInput(io.RawIOBase):
    """A seekable Python file over a Hadoop ``FSDataInputStream`` (Parquet footers are read through it)."""

    def __init__(self, jvm: Any, stream: Any, size: int) -> None:
        super().__init__()
        self._io = jvm.org.apache.commons.io.IOUtils
        self._stream, self._size, self._pos = stream, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, min(self._size, base + offset))
        self._stream.seek(self._pos)
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        left = self._size - self._pos
        n = left if size is None or size < 0 else min(size, left)
        if n <= 0:
            return b""
        data = bytes(self._io.toByteArray(self._stream, n))
        self._pos += len(data)
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._stream.close()
        super().close()


class _JavaOutput(io.RawIOBase):
    """A Python file over a Hadoop ``FSDataOutputStream``; close() makes the data durable (hsync)."""

    def __init__(self, stream: Any) -> None:
        super().__init__()
        self._stream, self._pos = stream, 0

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def write(self, data: Any) -> int:
        raw = bytes(data)
        self._stream.write(bytearray(raw))
        self._pos += len(raw)
        return len(raw)

    def flush(self) -> None:
        if not self.closed:
            self._stream.hflush()

    def close(self) -> None:
        if not self.closed:
            self._stream.hflush()
            self._stream.hsync()
            self._stream.close()
        super().close()


def hadoop_filesystem(spark: "SparkSession", uri: str) -> pafs.FileSystem:
    """A pyarrow file system for ``uri``'s store, backed by the session's Hadoop configuration."""
    return pafs.PyFileSystem(HadoopHandler(spark, uri))
