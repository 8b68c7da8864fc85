"""Snappy's block format: the compression Prometheus remote write 1.0 requires.

A remote-write body is a protobuf ``WriteRequest`` compressed with snappy's *block* format (not
the framed stream format) and sent with ``Content-Encoding: snappy``. Only this one use needs
snappy, and the format is small and fully specified (google/snappy ``format_description.txt``),
so it is written out here instead of pulling a compiled dependency into every package. Pure
arithmetic on bytes: no I/O.

The block format:

- a preamble, the uncompressed length as a little-endian base-128 varint;
- elements, each starting with a tag byte whose two low bits say which:
  ``00`` a literal (length-1 in the upper six bits, or in 1-4 following bytes when ≥ 60),
  ``01`` a copy of 4-11 bytes at an offset below 2048 (one more offset byte),
  ``10`` a copy of 1-64 bytes with a 2-byte offset, ``11`` the same with a 4-byte offset.

:func:`compress` is a greedy matcher over 4-byte hashes (what the reference encoder does, without
its skipping heuristics); :func:`decompress` checks every length and offset, so a malformed block
is a :class:`SnappyError` with one line saying where, never an ``IndexError``.
"""

from __future__ import annotations

from typing import Final

MAX_BLOCK: Final = 1 << 32
"""The largest uncompressed length the preamble may declare (a 32-bit length, as the format)."""
_HASH_BITS: Final = 14
_MIN_MATCH: Final = 4
_MAX_OFFSET: Final = 1 << 16
"""Copies reach back at most 64 KiB, so every copy fits the 2-byte-offset form."""


class SnappyError(ValueError):
    """A block that is not valid snappy; the message says what and where."""


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _literal(out: bytearray, data: bytes | memoryview) -> None:
    n = len(data) - 1
    if n < 60:
        out.append(n << 2)
    else:
        width = (n.bit_length() + 7) // 8
        out.append((59 + width) << 2)
        out += n.to_bytes(width, "little")
    out += data


def _copy(out: bytearray, offset: int, length: int) -> None:
    # Long matches are cut into 64-byte copies (the 2-byte form's limit), keeping the last
    # piece at least 4 long so it may use the 1-byte-offset form.
    while length >= 68:
        out += bytes([2 | (63 << 2)]) + offset.to_bytes(2, "little")
        length -= 64
    if length > 64:
        out += bytes([2 | (59 << 2)]) + offset.to_bytes(2, "little")
        length -= 60
    if 4 <= length <= 11 and offset < 2048:
        out += bytes([1 | ((length - 4) << 2) | ((offset >> 8) << 5), offset & 0xFF])
    else:
        out += bytes([2 | ((length - 1) << 2)]) + offset.to_bytes(2, "little")


def compress(data: bytes) -> bytes:
    """``data`` as one snappy block."""
    if len(data) >= MAX_BLOCK:
        raise SnappyError(f"{len(data)} bytes is past snappy's 32-bit block length")
    out = bytearray(_varint(len(data)))
    table: dict[int, int] = {}
    view = memoryview(data)
    literal_start = 0
    i = 0
    end = len(data) - _MIN_MATCH
    while i <= end:
        key = int.from_bytes(data[i : i + 4], "little")
        candidate = table.get(key)
        table[key] = i
        if candidate is None or i - candidate > _MAX_OFFSET - 1:
            i += 1
            continue
        length = 4
        while i + length < len(data) and data[candidate + length] == data[i + length]:
            length += 1
        if literal_start < i:
            _literal(out, view[literal_start:i])
        _copy(out, i - candidate, length)
        i += length
        literal_start = i
    if literal_start < len(data):
        _literal(out, view[literal_start:])
    return bytes(out)


def _read_varint(block: bytes) -> tuple[int, int]:
    value = shift = 0
    for pos, byte in enumerate(block[:5]):
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos + 1
        shift += 7
    raise SnappyError("the length preamble is not a varint of at most 5 bytes")


def _literal_at(block: bytes, pos: int, tag: int) -> tuple[bytes, int]:
    """The literal whose tag was just read, and the position after it."""
    n = tag >> 2
    if n >= 60:
        width = n - 59
        if pos + width > len(block):
            raise SnappyError(f"literal length cut short at byte {pos}")
        n = int.from_bytes(block[pos : pos + width], "little")
        pos += width
    n += 1
    if pos + n > len(block):
        raise SnappyError(f"literal of {n} bytes runs past the block at byte {pos}")
    return block[pos : pos + n], pos + n


def _copy_at(block: bytes, pos: int, tag: int) -> tuple[int, int, int]:
    """``(offset, length, next position)`` of the copy whose tag was just read."""
    if tag & 3 == 1:
        if pos + 1 > len(block):
            raise SnappyError(f"copy offset cut short at byte {pos}")
        return ((tag >> 5) << 8) | block[pos], ((tag >> 2) & 7) + 4, pos + 1
    width = 2 if tag & 3 == 2 else 4
    if pos + width > len(block):
        raise SnappyError(f"copy offset cut short at byte {pos}")
    return int.from_bytes(block[pos : pos + width], "little"), (tag >> 2) + 1, pos + width


def decompress(block: bytes, *, limit: int = MAX_BLOCK) -> bytes:
    """The bytes ``block`` encodes; a declared length over ``limit`` is refused before any work."""
    if not block:
        raise SnappyError("empty block: no length preamble")
    length, pos = _read_varint(block)
    if length > limit:
        raise SnappyError(f"the block declares {length} bytes, over the limit of {limit}")
    out = bytearray()
    while pos < len(block):
        tag = block[pos]
        if tag & 3 == 0:
            literal, pos = _literal_at(block, pos + 1, tag)
            out += literal
        else:
            offset, n, pos = _copy_at(block, pos + 1, tag)
            if offset == 0 or offset > len(out):
                raise SnappyError(f"copy offset {offset} reaches before the start at byte {pos}")
            start = len(out) - offset
            for k in range(n):  # may overlap itself (a run): byte by byte
                out.append(out[start + k])
        if len(out) > length:
            raise SnappyError(f"the block decodes past its declared length of {length}")
    if len(out) != length:
        raise SnappyError(f"the block decodes to {len(out)} bytes, not the declared {length}")
    return bytes(out)
