"""The Setting routes at the ASGI seam: what is decided before a review, and what is asked.

The worker's app runs as in production; the cluster is a transport that serves the Secret
``gpustack-settings`` (and records every upstream request), the SubjectAccessReview a function
that records each review and answers from a rule. A name that is no key, or a namespace other
than the release's, must be answered 404 with no review and no read: the catalog is fixed, so
the answer leaks nothing, and what is authorized is exactly what is read. The store's writes
are checked against a Secret that another writer moves: decided again on a fresh read, unless
the caller named the version (then the 409 is the caller's).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

import httpx
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from asgi_probe import asgi_get
from gpustack_core.settings import BY_NAME
from gpustack_core.status import StatusError
from gpustack_kube.client import KubeClient
from gpustack_kube.config import KubeConfig
from gpustack_worker.api import Surface, build_app
from gpustack_worker.authn import UserInfo
from gpustack_worker.authz import Authorizer
from gpustack_worker.settings_api import SettingsStore
from gpustack_worker.settings_v1 import Wanted
from gpustack_worker.subresource import Sources
from gpustack_worker.summaries import SummaryCache
from patience import HANG

ROOT = b"/apis/gpustack.ai/v1"
NS = "gpustack-system"
ONE = b"metadata.name%3Dworkload-fit-affinity"
SECRET_LIST = {
    "kind": "SecretList",
    "apiVersion": "v1",
    "metadata": {"resourceVersion": "900"},
    "items": [
        {
            "metadata": {"name": "gpustack-settings", "namespace": NS, "resourceVersion": "77"},
            "data": {"workload-fit-affinity": base64.b64encode(b"false").decode()},
        }
    ],
}


class _Caller:
    async def authenticate(self, chain: Any, headers: Any) -> UserInfo:
        return UserInfo(name="alice", groups=("system:authenticated",))


class Cluster:
    def __init__(self, allowed: bool) -> None:
        self.allowed = allowed
        self.reviews: list[dict[str, Any]] = []
        self.upstream: list[str] = []

    async def review(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self.reviews.append(dict(body["spec"]["resourceAttributes"]))
        return {"status": {"allowed": self.allowed}}

    def transport(self, request: httpx.Request) -> httpx.Response:
        self.upstream.append(f"{request.method} {request.url.raw_path.decode()}")
        return httpx.Response(200, json=SECRET_LIST)

    async def ask(self, raw: bytes, method: str = "GET") -> tuple[int, dict[str, Any]]:
        async with trio.open_nursery() as nursery:
            config = KubeConfig("https://api.invalid", None, None, None, False, "default")
            client = KubeClient(config, transport=httpx.MockTransport(self.transport))

            async def no_summary(node: str) -> Any:
                raise AssertionError("no kubelet is read for a Setting")

            surface = Surface(
                sources=Sources(client, SummaryCache(no_summary, nursery), system_namespace=NS),
                authenticator=_Caller,  # type: ignore[arg-type]
                authorizer=Authorizer(self.review, nursery, allowed_ttl=0, denied_ttl=0),
            )
            status, body = await asgi_get(build_app(surface), raw, method=method)
            await client.aclose()
            nursery.cancel_scope.cancel()
        return status, json.loads(body.split(b"\n")[0]) if body else {}  # a watch: its first


@pytest.mark.parametrize("method", ["GET", "PATCH", "PUT"])
@pytest.mark.parametrize(
    ("path", "message"),
    [
        (b"/namespaces/gpustack-system/settings/no-such-key",
         'settings.gpustack.ai "no-such-key" not found'),
        (b"/namespaces/default/settings/workload-fit-affinity",
         'settings.gpustack.ai "workload-fit-affinity" not found'),
    ],
)  # fmt: skip
async def test_no_key_or_another_namespace_is_404_before_any_review_or_read(
    path: bytes, message: str, method: str
) -> None:
    cluster = Cluster(allowed=True)
    status, body = await cluster.ask(ROOT + path, method)
    assert (status, body["message"], body["reason"]) == (404, message, "NotFound")
    assert cluster.reviews == []
    assert cluster.upstream == []


async def test_a_get_is_reviewed_for_exactly_its_verb_resource_namespace_and_name() -> None:
    cluster = Cluster(allowed=True)
    status, body = await cluster.ask(
        ROOT + b"/namespaces/gpustack-system/settings/workload-fit-affinity"
    )
    assert status == 200
    assert body["spec"] == {"value": "false"}
    assert body["metadata"]["resourceVersion"] == "77"
    assert cluster.reviews == [{"verb": "get", "group": "gpustack.ai", "resource": "settings",
                                "namespace": NS, "name": "workload-fit-affinity"}]  # fmt: skip
    # The Secret is read by name (a list the authorizer reads as that name), escaped.
    assert cluster.upstream == [
        f"GET /api/v1/namespaces/{NS}/secrets?fieldSelector=metadata.name%3Dgpustack-settings"
    ]


async def test_a_list_by_name_is_reviewed_for_that_name() -> None:
    cluster = Cluster(allowed=True)
    status, body = await cluster.ask(
        ROOT + b"/namespaces/gpustack-system/settings?fieldSelector=" + ONE
    )
    assert status == 200
    assert [i["metadata"]["name"] for i in body["items"]] == ["workload-fit-affinity"]
    assert body["metadata"] == {"resourceVersion": "900"}
    assert cluster.reviews == [{"verb": "list", "group": "gpustack.ai", "resource": "settings",
                                "namespace": NS, "name": "workload-fit-affinity"}]  # fmt: skip


async def test_a_denied_caller_reads_and_writes_nothing() -> None:
    cluster = Cluster(allowed=False)
    for method in ("GET", "PATCH"):
        status, body = await cluster.ask(
            ROOT + b"/namespaces/gpustack-system/settings/workload-fit-affinity", method
        )
        assert status == 403
        verb = method.lower()
        assert body["message"].startswith(
            f'settings.gpustack.ai "workload-fit-affinity" is forbidden: User "alice" cannot '
            f'{verb} resource "settings" in API group "gpustack.ai" in the namespace '
            '"gpustack-system"'
        )
    assert cluster.upstream == []


async def test_create_and_delete_are_not_served() -> None:
    cluster = Cluster(allowed=True)
    for method, path in (
        ("POST", b"/namespaces/gpustack-system/settings"),
        ("DELETE", b"/namespaces/gpustack-system/settings/workload-fit-affinity"),
    ):
        status, _ = await cluster.ask(ROOT + path, method)
        assert status == 405
    assert cluster.upstream == []


SEGMENT = st.one_of(
    st.sampled_from(["gpustack-system", "workload-fit-affinity", "..", ".", "", "%2F", "%00"]),
    st.text(alphabet=st.characters(codec="ascii"), max_size=20),
)


@settings(max_examples=150, deadline=None)
@given(
    namespace=SEGMENT,
    name=SEGMENT,
    tail=st.sampled_from([b"", b"?watch=1&timeoutSeconds=1", b"?fieldSelector=spec.x%3D1", b"/x"]),
    method=st.sampled_from(["GET", "PATCH", "PUT", "DELETE"]),
)
async def test_no_settings_path_makes_the_worker_fail(
    namespace: str, name: str, tail: bytes, method: str
) -> None:
    cluster = Cluster(allowed=True)
    raw = ROOT + b"/namespaces/" + _escape(namespace) + b"/settings/" + _escape(name) + tail
    async with trio.open_nursery():
        with trio.fail_after(HANG):
            status, _ = await cluster.ask(raw, method)
    assert status < 500, raw
    for upstream in cluster.upstream:  # only ever the Secret, by name
        assert upstream.split("?")[0].endswith(f"/api/v1/namespaces/{NS}/secrets") or (
            upstream.endswith(f"/api/v1/namespaces/{NS}/secrets/gpustack-settings")
        ), upstream


def _escape(segment: str) -> bytes:
    out = bytearray()
    for char in segment.encode("ascii", "replace"):
        if chr(char).isalnum() or chr(char) in "-._~%!$&'()*+,;=:@":
            out.append(char)
        else:
            out += f"%{char:02X}".encode()
    return bytes(out)


# -- the store's writes ---------------------------------------------------------------------

CONFLICT = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict",
            "code": 409, "message": "the object has been modified"}  # fmt: skip


class Writes:
    """A Secret whose first patch meets another writer (409), then applies."""

    def __init__(self) -> None:
        self.version = 10
        self.patches: list[dict[str, Any]] = []

    def transport(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            self.version += 1  # another writer moved it since the last read
            listed = json.loads(json.dumps(SECRET_LIST))
            listed["items"][0]["metadata"]["resourceVersion"] = str(self.version)
            return httpx.Response(200, json=listed)
        body = json.loads(request.content)
        self.patches.append(body)
        if len(self.patches) == 1:
            return httpx.Response(409, json=CONFLICT)
        secret = json.loads(json.dumps(SECRET_LIST["items"][0]))
        secret["data"].update(body["data"])
        secret["metadata"]["resourceVersion"] = str(self.version + 1)
        return httpx.Response(200, json=secret)


async def _write(writes: Writes, caller_version: str) -> Any:
    config = KubeConfig("https://api.invalid", None, None, None, False, "default")
    key = BY_NAME["workload-fit-affinity"]
    async with KubeClient(config, transport=httpx.MockTransport(writes.transport)) as client:
        store = SettingsStore(client, NS)
        return await store.write(key, lambda _current: Wanted(key, "true", caller_version))


async def test_a_patch_meeting_another_writer_is_decided_again_on_a_fresh_read() -> None:
    writes = Writes()
    written = await _write(writes, "")
    assert [p["metadata"]["resourceVersion"] for p in writes.patches] == ["11", "12"]
    assert all(p["data"] == {"workload-fit-affinity": "dHJ1ZQ=="} for p in writes.patches)
    assert written["spec"] == {"value": "true"}
    assert written["metadata"]["resourceVersion"] == "13"


async def test_a_write_on_the_callers_version_is_its_409() -> None:

    writes = Writes()
    with pytest.raises(StatusError) as caught:
        await _write(writes, "5")
    assert caught.value.code == 409
    assert caught.value.message.startswith(
        'Operation cannot be fulfilled on settings.gpustack.ai "workload-fit-affinity": '
        "the object has been modified"
    )
    assert [p["metadata"]["resourceVersion"] for p in writes.patches] == ["5"]
