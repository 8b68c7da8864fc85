"""Rendering on demand and only what changed writes the bytes a fresh render writes, every round.

The reference is :func:`_render_direct`, itself held byte for byte to prometheus_client's
encoders (``test_exposition_render.py``); the gzip form is checked by two inflaters, one of them
reading a single member as httpx does. What is reused is checked by identity: a family whose
lines did not change keeps its very bytes, a round nobody scraped rendered nothing, and a
second scrape of a round is handed the bytes the first one made.
"""

from __future__ import annotations

import gzip
import hashlib
import math
import zlib
from collections.abc import Callable

import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.utils import floatToGoString

from gpustack_devicemanager.exposition import ExpositionHolder, Family, _render_direct
from gpustack_devicemanager.incremental import _number

NAMES = ("gpu_a", "gpu_b", "gpu_c", "gpu_d")
LABELS = {"gpu_a": ("node", "id"), "gpu_b": (), "gpu_c": ("z", "a", "m"), "gpu_d": ("x",)}
VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e6, 1234567.0, 1e21, 0.1, 100.0, math.nan]),
)
LABEL_VALUES = st.sampled_from(["", "a", 'q"uote', "back\\slash", "new\nline", "Sliced", "ü"])


@st.composite
def rounds(draw: st.DrawFn) -> list[list[Family]]:
    """Several rounds over a few families: series come and go, values stay or change."""
    found: list[list[Family]] = []
    previous: dict[str, list[tuple[tuple[str, ...], float]]] = {}
    for _ in range(draw(st.integers(min_value=1, max_value=5))):
        families = []
        for name in draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=4)):
            labels = LABELS[name]
            samples: list[tuple[tuple[str, ...], float]] = []
            for values, value in previous.get(name, []):
                fate = draw(st.sampled_from(["keep", "change", "drop"]))
                if fate != "drop":
                    samples.append((values, value if fate == "keep" else draw(VALUES)))
            for _ in range(draw(st.integers(min_value=0, max_value=3))):
                values = tuple(draw(LABEL_VALUES) for _ in labels)
                if all(v != values for v, _ in samples):
                    samples.append((values, draw(VALUES)))
            if draw(st.booleans()):  # the order moved: matched by label set, not position
                samples = list(draw(st.permutations(samples)))
            doc = draw(st.sampled_from(["doc", 'say "why"', "two\nlines \\ here"]))
            family = Family(name, doc, labels)
            for values, value in samples:
                family.add(values, value)
            families.append(family)
            previous[name] = samples
        found.append(families)
    return found


def inflate_one_member(data: bytes) -> bytes:
    """As httpx does: one decompressor, what follows the first member ignored."""
    decompressor = zlib.decompressobj(zlib.MAX_WBITS | 16)
    body = decompressor.decompress(data) + decompressor.flush()
    assert decompressor.eof
    assert decompressor.unused_data == b""
    return body


@settings(max_examples=300, deadline=None)
@given(rounds())
def test_every_round_is_what_a_fresh_render_writes(sequence: list[list[Family]]) -> None:
    holder = ExpositionHolder()
    for families in sequence:
        holder.publish(families)
        text, openmetrics = _render_direct(families) or (b"", b"")
        for body, expected in (
            (holder.current.openmetrics_body, openmetrics),
            (holder.current.text_body, text),
        ):
            assert body.identity == expected
            assert body.etag == f'"{hashlib.sha256(expected).hexdigest()[:32]}"'
            assert gzip.decompress(body.gzipped) == expected
            assert inflate_one_member(body.gzipped) == expected


CLIENT_SPELLING: Callable[[float], str] = floatToGoString  # untyped in prometheus_client


@settings(max_examples=2000, deadline=None)
@given(st.one_of(st.floats(), st.integers(min_value=-(2**70), max_value=2**70)))
def test_numbers_are_written_as_the_client_writes_them(value: float) -> None:
    assert _number(value) == CLIENT_SPELLING(value)


def family(name: str, value: float) -> Family:
    made = Family(name, "doc", ("node",))
    made.add(("n1",), value)
    return made


def test_an_unchanged_family_keeps_its_bytes_and_a_changed_one_does_not() -> None:
    holder = ExpositionHolder()
    holder.publish([family("still", 1.0), family("moving", 1.0)])
    first = list(holder.current.text_body.pieces)
    holder.publish([family("still", 1.0), family("moving", 2.0)])
    second = list(holder.current.text_body.pieces)
    # header, lines of "still"; header, lines of "moving"
    assert second[1] is first[1]
    assert second[3] is not first[3]
    assert second[3].data == b'moving{node="n1"} 2.0\n'
    holder.publish([family("still", -0.0), family("moving", 2.0)])  # -0.0 == 0.0, not alike
    assert holder.current.text_body.pieces[1].data == b'still{node="n1"} -0.0\n'


def test_a_round_nobody_scrapes_renders_nothing() -> None:
    holder = ExpositionHolder()
    holder.publish([family("g", 1.0)])
    assert not holder.current.ready(openmetrics=False, gzipped=False)
    assert not holder.current.ready(openmetrics=True, gzipped=True)
    assert holder._renderer.states == {}


def test_the_first_scrape_makes_one_format_and_the_next_only_hand_it_over() -> None:
    holder = ExpositionHolder()
    holder.publish([family("g", 1.0)])
    prometheus = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"

    async def scrapes() -> None:
        body, content_type = await holder.prepare(prometheus, gzipped=True)
        assert content_type.startswith("application/openmetrics-text")
        assert holder.current.ready(openmetrics=True, gzipped=True)
        assert not holder.current.ready(openmetrics=False, gzipped=False)  # never asked for
        again, _ = await holder.prepare(prometheus, gzipped=True)
        assert again is body
        assert again.gzipped is body.gzipped
        assert gzip.decompress(body.gzipped).endswith(b"# EOF\n")

    trio.run(scrapes)
