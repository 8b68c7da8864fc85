"""A round's exposition rendered when first asked for, and only where it changed since the last.

A round used to render both formats and gzip both at ~10k series every monitor period (~90 ms
CPU), whether anyone scraped or not. Prometheus asks for one format, gzipped, about once a
period, and between two rounds every series keeps its label set and many keep their value. So:

* nothing is rendered until a scrape asks for a format: a round nobody scrapes costs its compose;
* a series line is formatted again only when its value changed (its label part is kept);
* a family whose lines all stayed keeps its bytes and its compressed form;
* gzip is stitched from per-family raw-deflate pieces, each ended by a full flush (nothing after
  it refers back across it: pigz's technique), so a round compresses only the families that
  changed, and only once someone asked for gzip. The result is one ordinary gzip member.

The bytes equal :func:`gpustack_devicemanager.exposition._render_direct`'s (prometheus_client's):
``tests/unit/devicemanager/test_incremental.py`` checks it over sequences of rounds.
"""

from __future__ import annotations

import hashlib
import math
import re
import struct
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from prometheus_client.utils import floatToGoString

from gpustack_devicemanager.encoded import EXPOSITION_GZIP_LEVEL, etag_matches

_go_float: Callable[[float], str] = floatToGoString
"""Go's float formatting as the client writes it (``+Inf``, ``NaN``, ``1e+06``); untyped there."""

_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
"""The legacy character set; anything else goes to the client's encoder (never ours)."""
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
"""A gzip member's header: deflate, no name, ``mtime`` 0 (the same body, the same bytes)."""


def _deflate(data: bytes, flush: int) -> bytes:
    compressor = zlib.compressobj(EXPOSITION_GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush(flush)


_LAST_BLOCK = _deflate(b"", zlib.Z_FINISH)
"""An empty final deflate block: what closes the stitched stream."""


Sample = tuple[tuple[str, ...], float]


class Piece:
    """Bytes of a body, and (once asked) their raw deflate, ended on a byte boundary."""

    __slots__ = ("_deflated", "data")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self._deflated: bytes | None = None

    def deflated(self) -> bytes:
        """Compressed once; a piece shared by two rounds or two formats is not compressed again."""
        if self._deflated is None:
            self._deflated = _deflate(self.data, zlib.Z_FULL_FLUSH)
        return self._deflated


EOF = Piece(b"# EOF\n")


class Body:
    """One format of one round: its entity tag at once, identity and gzip bytes when asked."""

    def __init__(self, pieces: Sequence[Piece]) -> None:
        self.pieces = [piece for piece in pieces if piece.data]
        digest = hashlib.sha256()
        for piece in self.pieces:
            digest.update(piece.data)
        self.etag = f'"{digest.hexdigest()[:32]}"'

    @cached_property
    def identity(self) -> bytes:
        """The uncompressed body."""
        return b"".join(piece.data for piece in self.pieces)

    @cached_property
    def gzipped(self) -> bytes:
        """One gzip member: the pieces' deflate, a final empty block, CRC-32 and length."""
        crc = 0
        size = 0
        for piece in self.pieces:
            crc = zlib.crc32(piece.data, crc)
            size += len(piece.data)
        deflated = b"".join(piece.deflated() for piece in self.pieces)
        trailer = struct.pack("<II", crc, size & 0xFFFFFFFF)
        return _GZIP_HEADER + deflated + _LAST_BLOCK + trailer

    def made(self, gzipped: bool) -> bool:
        """Whether that encoding's bytes are made already (a scrape then only hands them over)."""
        return ("gzipped" if gzipped else "identity") in self.__dict__  # cached_property's slot

    def matches(self, if_none_match: str) -> bool:
        """Whether an ``If-None-Match`` header names this body."""
        return etag_matches(self.etag, if_none_match)


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


_Entry = tuple[str, float, str]
"""A series' label part (``name{...} ``), its value and its whole line."""


def _number(value: float) -> str:
    """A sample value as Go writes it: :func:`floatToGoString`, its common case inline.

    A finite float Go writes as Python does needs no call: ~10k changed series a round make
    the call overhead count.
    """
    if type(value) is float and value - value == 0.0:  # finite (inf - inf and NaN are NaN)
        text = repr(value)
        if value <= 0 or text.find(".") <= 6:
            return text
    return _go_float(value)


def _same(old: float, new: float) -> bool:
    """Equal and written alike: ``-0.0 == 0.0`` but Go writes ``-0``; NaN is never reused."""
    return old == new and (new != 0.0 or math.copysign(1.0, old) == math.copysign(1.0, new))


class FamilyState:
    """What the last render kept of one family: headers, each series' line, the lines' bytes."""

    def __init__(self, name: str, documentation: str, labels: tuple[str, ...]) -> None:
        self.name = name
        self.labels = labels
        self.order = sorted(range(len(labels)), key=lambda i: labels[i])
        self.keys = [f'{labels[i]}="' for i in self.order]
        doc = documentation.replace("\\", r"\\").replace("\n", r"\n")
        self.text_header = Piece(f"# HELP {name} {doc}\n# TYPE {name} gauge\n".encode())
        quoted = doc.replace('"', r"\"")
        self.openmetrics_header = Piece(f"# HELP {name} {quoted}\n# TYPE {name} gauge\n".encode())
        self.samples: list[tuple[tuple[str, ...], _Entry]] = []
        self.lines: list[str] = []
        self.piece = Piece(b"")

    def _prefix(self, values: tuple[str, ...], escaped: dict[str, str]) -> str:
        if not self.keys:
            return f"{self.name} "
        parts = []
        for key, i in zip(self.keys, self.order, strict=True):
            raw = values[i]
            done = escaped.get(raw)
            if done is None:
                done = escaped[raw] = _escape(raw)
            parts.append(key + done + '"')
        return f"{self.name}{{{','.join(parts)}}} "

    def render(self, samples: Sequence[tuple[tuple[str, ...], float]]) -> Piece:
        """The round's sample lines; the last piece itself when no line changed.

        A round lists a family's series in the order the last one did, as a rule: each is
        matched by position first (a tuple compare, no hashing), by label set only once the
        order moved. Series gone this round are forgotten, so the state stays bounded.
        """
        previous = self.samples
        count = len(previous)
        by_labels: dict[tuple[str, ...], _Entry] | None = None
        kept: list[tuple[tuple[str, ...], _Entry]] = []
        lines: list[str] = []
        escaped: dict[str, str] = {}
        for position, (values, value) in enumerate(samples):
            entry: _Entry | None = None
            if position < count and previous[position][0] == values:
                entry = previous[position][1]
            else:
                if by_labels is None:
                    by_labels = dict(previous)
                entry = by_labels.get(values)
            if entry is None or not _same(entry[1], value):
                prefix = entry[0] if entry is not None else self._prefix(values, escaped)
                entry = (prefix, value, f"{prefix}{_number(value)}\n")
            kept.append((values, entry))
            lines.append(entry[2])
        self.samples = kept
        if lines != self.lines:
            self.lines = lines
            self.piece = Piece("".join(lines).encode())
        return self.piece


@dataclass
class Renderer:
    """The families' states across rounds: one per holder, used by one thread at a time."""

    states: dict[tuple[str, str, tuple[str, ...]], FamilyState] = field(default_factory=dict)

    def pieces(
        self, families: Sequence[tuple[str, str, tuple[str, ...], Sequence[Sample]]]
    ) -> list[tuple[FamilyState, Piece]] | None:
        """Each family's state and lines, or ``None`` when a name is outside the legacy set."""
        for name, _, labels, _ in families:
            if not _NAME.fullmatch(name) or not all(_NAME.fullmatch(label) for label in labels):
                return None
        states: dict[tuple[str, str, tuple[str, ...]], FamilyState] = {}
        found = []
        for name, documentation, labels, samples in families:
            key = (name, documentation, labels)
            state = states.get(key) or self.states.get(key) or FamilyState(*key)
            states[key] = state
            found.append((state, state.render(samples)))
        self.states = states
        return found


def text_pieces(rendered: Sequence[tuple[FamilyState, Piece]]) -> list[Piece]:
    """The classic text format: each family's header and lines."""
    return [p for state, lines in rendered for p in (state.text_header, lines)]


def openmetrics_pieces(rendered: Sequence[tuple[FamilyState, Piece]]) -> list[Piece]:
    """OpenMetrics: the same lines, its own ``# HELP`` escaping, and ``# EOF``."""
    return [*(p for state, lines in rendered for p in (state.openmetrics_header, lines)), EOF]


__all__ = ["Body", "FamilyState", "Piece", "Renderer", "openmetrics_pieces", "text_pieces"]
