"""The request guard both daemons mount, and the DM's peer rule, probed at the ASGI seam."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asgi_probe import asgi_get
from gpustack_devicemanager.health import Liveness
from gpustack_devicemanager.holder import SnapshotHolder
from gpustack_devicemanager.server import build_app
from gpustack_kube.guard import host_problem, peer_is_loopback, request_problem


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "localhost:32443",
        "127.0.0.1",
        "10.0.0.7:32443",
        "[::1]",
        "[::1]:32443",
        "[fe80::1]",
        "gpu-node-1.example",
        "gpu-node-1.example.",
        "svc_internal.cluster.local",
        "a" * 63,
        ".".join(["a" * 63] * 3) + "." + "a" * 61,  # 253 characters
    ],
)
def test_hosts_a_client_may_send(host: str) -> None:
    assert host_problem(host) is None


@pytest.mark.parametrize(
    ("host", "why"),
    [
        ("", "empty"),
        ("a" * 64, "label longer than 63"),
        ("x." * 127 + "x", "longer than 253"),
        ("[::1", "closing bracket"),
        ("[::1]x", "junk after"),
        ("[zz::1]", "not an IPv6 address"),
        ("::1", "must be bracketed"),
        ("host:99999", "port"),
        ("host:", "port"),
        ("host:12a", "port"),
        ("exa mple", "not a host name"),
        ("a..b", "not a host name"),
        ("-lead", "not a host name"),
    ],
)
def test_hosts_refused_with_the_reason(host: str, why: str) -> None:
    problem = host_problem(host)
    assert problem is not None
    assert why in problem


@pytest.mark.parametrize(
    ("client", "loopback"),
    [
        (("127.0.0.1", 5), True),
        (("127.8.9.10", 5), True),  # all of 127.0.0.0/8
        (("::1", 5), True),
        (("::ffff:127.0.0.1", 5), True),
        (("10.0.0.7", 5), False),
        (("::ffff:10.0.0.7", 5), False),
        (("fe80::1%eth0", 5), False),
        (("localhost", 5), False),  # a name is no address
        (None, False),  # a unix socket, or no peer at all: deny
    ],
)
def test_loopback_is_the_peer_address(client: tuple[str, int] | None, loopback: bool) -> None:
    assert peer_is_loopback({"client": client}) is loopback


def _dm_app() -> Any:
    holder = SnapshotHolder(15)
    return build_app(holder, Liveness(15.0, 0.0), lambda: 0.0, lambda: {"podsSynced": True})


@pytest.mark.parametrize(
    ("client", "host", "expected"),
    [
        # the probe's exploit: any peer, claiming to be local
        (("10.0.0.7", 40000), b"localhost", 404),
        (("10.0.0.7", 40000), b"127.0.0.1:32443", 404),
        (("10.0.0.7", 40000), b"[::1]", 404),
        (("10.0.0.7", 40000), b"[::1]:32443", 404),
        # a loopback peer is local whatever it names
        (("127.0.0.1", 40000), b"gpu-node-1.example:32443", 200),
        (("::1", 40000), b"[::1]", 200),
    ],
)
async def test_debug_is_decided_on_the_peer(
    client: tuple[str, int], host: bytes, expected: int
) -> None:
    app = _dm_app()
    status, _ = await asgi_get(app, b"/debug/state", [(b"host", host)], client=client)
    assert status == expected
    put, body = await asgi_get(
        app, b"/debug/flags/v", [(b"host", host)], client=client, method="PUT"
    )
    assert put == (404 if expected == 404 else 400)  # empty body: a 400 from the route itself
    assert b"verbosity set" not in body


async def test_a_long_host_label_is_400_not_a_traceback(caplog: pytest.LogCaptureFixture) -> None:
    app = _dm_app()
    with caplog.at_level(logging.DEBUG):
        status, body = await asgi_get(app, b"/readyz", [(b"host", b"a" * 64)])
    assert status == 400
    assert body.startswith(b"400 Bad Request: invalid Host header")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


HEADER_VALUE = st.binary(max_size=300)
PATHS = st.one_of(
    st.sampled_from(
        [b"/monitor/snapshot", b"/metrics", b"/readyz", b"/livez", b"/debug/state", b"/"]
    ),
    st.binary(max_size=200).map(lambda b: b"/" + b.replace(b"?", b"")),
)


@settings(max_examples=300, deadline=None)
@given(path=PATHS, host=HEADER_VALUE, extra=st.lists(st.tuples(HEADER_VALUE, HEADER_VALUE)))
async def test_no_request_makes_the_device_manager_fail(
    path: bytes, host: bytes, extra: list[tuple[bytes, bytes]]
) -> None:
    """Arbitrary paths, Host values and headers: an answer below 500, and no error logged."""
    app = _dm_app()
    headers = [(b"host", host), *[(k or b"x-empty", v) for k, v in extra]]
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = records.append  # type: ignore[method-assign]
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        status, _ = await asgi_get(app, path, headers)
    finally:
        root.removeHandler(handler)
    assert status < 500, (path, host)
    assert not records, [r.getMessage() for r in records]


@given(
    host=st.text(max_size=300),
    path=st.text(max_size=300),
    headers=st.lists(st.tuples(st.binary(max_size=40), st.binary(max_size=200)), max_size=5),
)
def test_the_guard_never_raises(host: str, path: str, headers: list[tuple[bytes, bytes]]) -> None:
    assert host_problem(host) is None or isinstance(host_problem(host), str)
    scope = {"path": path, "headers": [(b"host", host.encode("utf-8")), *headers]}
    problem = request_problem(scope)
    assert problem is None or isinstance(problem, str)
