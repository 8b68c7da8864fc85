"""Bounded reads of the files a user names: a kubeconfig and what it names, a recording.

A path given on a command line or in a kubeconfig can name something endless (``/dev/zero``, a
FIFO someone keeps feeding) or merely enormous; reading it whole grew a CLI to 20 GB before it
failed. Every such read stops one byte past its limit and refuses the file as an ``OSError``
(``EFBIG``), which every caller already reports as one line naming the path.

It lives in the kube package because the kubeconfig reader is the first such reader and every
other one (the simulator's, the CLI's) may import this package; the core does no I/O.
"""

from __future__ import annotations

import errno
from pathlib import Path

CHUNK = 1 << 16


def size_text(limit: int) -> str:
    """``4 MiB``, ``512 KiB`` or ``100 bytes``: a limit as a message states it."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if limit >= 1 << shift and limit % (1 << shift) == 0:
            return f"{limit >> shift} {unit}"
    return f"{limit} bytes"


class TooLargeError(OSError):
    """A file holding more than its reader's limit; ``str()`` is ``<path>: larger than …``."""

    def __init__(self, path: Path, limit: int, what: str) -> None:
        super().__init__(errno.EFBIG, f"larger than the {size_text(limit)} a {what} may be")
        self.filename = str(path)
        self.limit = limit

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


def read_capped(path: Path, limit: int, what: str) -> bytes:
    """The file's bytes, at most ``limit`` of them; :class:`TooLargeError` when it holds more.

    Read in chunks and refused as soon as it passes the limit, whatever the file is (a regular
    file, a device, a FIFO), so memory stays bounded by the limit.
    """
    with path.open("rb") as stream:
        data = bytearray()
        while len(data) <= limit:
            chunk = stream.read(min(CHUNK, limit + 1 - len(data)))
            if not chunk:
                return bytes(data)
            data += chunk
    raise TooLargeError(path, limit, what)


class NotUtf8Error(ValueError):
    """A text file that is not UTF-8; ``str()`` names the path and the first bad byte."""

    def __init__(self, path: Path, offset: int) -> None:
        self.problem = f"not UTF-8 text (byte {offset} cannot be decoded)"
        super().__init__(f"{path}: {self.problem}")


def read_text_capped(path: Path, limit: int, what: str) -> str:
    """:func:`read_capped`, decoded as UTF-8 (:class:`NotUtf8Error` when it is not)."""
    data = read_capped(path, limit, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotUtf8Error(path, exc.start) from exc
