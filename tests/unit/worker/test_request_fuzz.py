"""The worker's request edges fuzzed at the ASGI seam: no 500, and nothing logged as an error.

The routes run as in production (the guard, raw-path splitting, name validation, the
subresource's fetch path); only the cluster is a transport that answers 404 for every object,
and authentication and authorization admit the caller, so every path reaches the code that
parses it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import httpx
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from asgi_probe import asgi_get
from gpustack_kube.client import KubeClient
from gpustack_kube.config import KubeConfig
from gpustack_worker.api import Surface, build_app
from gpustack_worker.authn import UserInfo
from gpustack_worker.authz import Authorizer
from gpustack_worker.subresource import Sources
from gpustack_worker.summaries import SummaryCache

V1 = b"/apis/worker.gpustack.ai/v1"
NOT_FOUND = (
    b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
    b'"message":"not found","reason":"NotFound","code":404}'
)


class _Admitting:
    async def authenticate(self, chain: Any, headers: Any) -> UserInfo:
        return UserInfo(name="admin", groups=("system:masters",))


async def _allow(path: str, body: Mapping[str, Any]) -> dict[str, Any]:
    return {"status": {"allowed": True, "reason": "fuzzing"}}


def _no_objects(request: httpx.Request) -> httpx.Response:
    seen.append(request.url.raw_path)
    return httpx.Response(404, content=NOT_FOUND, headers={"Content-Type": "application/json"})


seen: list[bytes] = []

SEGMENT = st.one_of(
    st.sampled_from(["team-a", "llama-70b", "..", ".", "", "%2F", "%23", "%3F", "%00", "%ff"]),
    st.text(alphabet=st.characters(codec="ascii"), max_size=20),
)
TAILS = st.sampled_from(
    [b"", b"/metrics", b"/metrics/x", b"/status", b"/", b"//metrics", b"?watch=1", b"?limit=1"]
)


@settings(max_examples=250, deadline=None)
@given(
    namespace=SEGMENT,
    name=SEGMENT,
    tail=TAILS,
    host=st.binary(max_size=120),
    method=st.sampled_from(["GET", "HEAD", "PUT", "DELETE", "OPTIONS"]),
)
async def test_no_path_or_host_makes_the_worker_fail(
    namespace: str, name: str, tail: bytes, host: bytes, method: str
) -> None:
    raw = V1 + b"/namespaces/" + _escape(namespace) + b"/instances/" + _escape(name) + tail
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = records.append  # type: ignore[method-assign]
    logging.getLogger().addHandler(handler)
    seen.clear()
    try:
        async with trio.open_nursery() as nursery:
            config = KubeConfig("https://api.invalid", None, None, None, False, "default")
            client = KubeClient(config, transport=httpx.MockTransport(_no_objects))

            async def no_summary(node: str) -> Any:
                raise AssertionError("no Pod exists, so no kubelet is read")

            surface = Surface(
                sources=Sources(client, SummaryCache(no_summary, nursery)),
                authenticator=_Admitting,  # type: ignore[arg-type]
                authorizer=Authorizer(_allow, nursery),
            )
            status, body = await asgi_get(build_app(surface), raw, [(b"host", host)], method=method)
            await client.aclose()
            nursery.cancel_scope.cancel()
    finally:
        logging.getLogger().removeHandler(handler)
    assert status < 500, (raw, host, body[:300])
    assert not records, [r.getMessage() for r in records]
    for upstream in seen:  # whatever was read upstream is one escaped name, never a query
        assert b"?" not in upstream
        assert b"#" not in upstream


def _escape(segment: str) -> bytes:
    """Leave the fuzzer's own escapes alone; escape everything a raw path cannot carry."""
    out = bytearray()
    for char in segment.encode("ascii", "replace"):
        if chr(char).isalnum() or chr(char) in "-._~%!$&'()*+,;=:@":
            out.append(char)
        else:
            out += f"%{char:02X}".encode()
    return bytes(out)
