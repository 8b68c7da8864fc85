"""The Pod webhook's fit pin (``workload-fit-affinity``), at the webhook's own entry point.

Reviews go in as kube-apiserver sends them; the answer's JSONPatch is applied with the
stand-in's RFC 6902 implementation (not the webhook's), and the expressions expected are the
reference's spelling (``sliced-max-free-units.fit.gpustack.ai/<aKey> Gt U-1``, a shared request
of N >= 2 cards ``shared-free-cards.fit.gpustack.ai/<aKey> Gt N-1``), with U the fold computed by
hand (20 % of a card is 320,000 units).
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import httpx
import trio

from gpustack_core.settings import Settings
from gpustack_kube.client import KubeClient
from gpustack_kube.config import KubeConfig
from gpustack_simulator.cluster.patch import json_patch
from gpustack_worker.admission import (
    DEVICES,
    MUTATE_PATH,
    VALIDATE_PATH,
    AdmissionWebhook,
    DevicesCache,
)
from gpustack_worker.api import Surface, build_app
from gpustack_worker.authz import Authorizer
from gpustack_worker.subresource import Sources
from gpustack_worker.summaries import SummaryCache

QUEUED = {"kueue.x-k8s.io/queue-name": "gpustack-fnv64-c4680bb149644f1c"}
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def devices(name: str, gid: str, cards: int) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"groups": [{
        "id": gid, "manufacturer": "nvidia", "memory": 23028,
        "accelerators": [{"id": f"{name}-{i}", "index": i} for i in range(cards)]}]}}  # fmt: skip


def cluster(status: int = 200) -> httpx.MockTransport:
    items = [devices("node-a10g", "a10g", 1), devices("node-t4-b", "tesla-t4", 4)]

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == DEVICES.path()
        if status != 200:
            return httpx.Response(status, json={"kind": "Status", "message": "down"})
        return httpx.Response(200, json={"kind": "DevicesList", "items": items})

    return httpx.MockTransport(answer)


def pod(
    limits: dict[str, str], labels: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": dict(QUEUED if labels is None else labels)},
            "spec": {"containers": [{"name": "main", "image": "busybox",
                                     "resources": {"limits": limits}}], **spec}}  # fmt: skip


def review(p: dict[str, Any]) -> bytes:
    request = {"uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
               "operation": "CREATE", "namespace": "team-a", "object": p}  # fmt: skip
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return json.dumps(body).encode()


async def judged(
    p: dict[str, Any], *, on: bool = True, status: int = 200, path: str = MUTATE_PATH
) -> tuple[dict[str, Any], AdmissionWebhook]:
    """The Pod as it will be stored (the answer's patch applied), and the webhook."""
    config = KubeConfig("https://api.invalid", None, None, None, False, "default")
    async with KubeClient(config, transport=cluster(status)) as client:
        webhook = AdmissionWebhook(DevicesCache(client), fit_affinity=lambda: on)
        code, body = await webhook.handle(path, review(p))
    assert code == 200, body
    response = json.loads(body)["response"]
    assert response["allowed"] is True, response
    if "patch" not in response:
        return p, webhook
    ops = json.loads(base64.b64decode(response["patch"]))
    return json_patch(copy.deepcopy(p), ops), webhook


def terms(p: dict[str, Any]) -> list[dict[str, Any]] | None:
    node = (p["spec"].get("affinity") or {}).get("nodeAffinity") or {}
    required = node.get(REQUIRED)
    return None if required is None else list(required["nodeSelectorTerms"])


SLICE_20 = {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "20"}


async def test_a_queued_slice_is_pinned_per_model_by_its_folded_units() -> None:
    stored, webhook = await judged(pod(SLICE_20))
    assert (
        stored["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu.sliced.units"]
        == "320000"
    )
    assert terms(stored) == [
        {"matchExpressions": [{"key": "sliced-max-free-units.fit.gpustack.ai/nvidia-a10g",
                               "operator": "Gt", "values": ["319999"]}]},
        {"matchExpressions": [{"key": "sliced-max-free-units.fit.gpustack.ai/nvidia-tesla-t4",
                               "operator": "Gt", "values": ["319999"]}]},
    ]  # fmt: skip
    assert webhook.pinned == 1
    again, _ = await judged(stored)  # a reinvoked webhook: nothing twice
    assert terms(again) == terms(stored)


async def test_a_pod_of_its_own_terms_keeps_them_anded_with_the_pin() -> None:
    own = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}  # fmt: skip
    stored, _ = await judged(pod(SLICE_20, affinity=own))
    found = terms(stored)
    assert found is not None
    assert [t["matchExpressions"][0] for t in found] == [
        {"key": "zone", "operator": "In", "values": ["a"]}
    ] * 2
    assert {t["matchExpressions"][1]["key"] for t in found} == {
        "sliced-max-free-units.fit.gpustack.ai/nvidia-a10g",
        "sliced-max-free-units.fit.gpustack.ai/nvidia-tesla-t4",
    }


async def test_shared_is_pinned_from_two_cards_and_exclusive_never() -> None:
    two, _ = await judged(pod({"nvidia.com/gpu.shared": "2"}))
    found = terms(two)
    assert found is not None
    assert found[1]["matchExpressions"] == [
        {
            "key": "shared-free-cards.fit.gpustack.ai/nvidia-tesla-t4",
            "operator": "Gt",
            "values": ["1"],
        }
    ]
    one, _ = await judged(pod({"nvidia.com/gpu.shared": "1"}))
    assert terms(one) is None
    whole, _ = await judged(pod({"nvidia.com/gpu": "2"}))
    assert terms(whole) is None


async def test_no_pin_when_off_unqueued_validating_or_devices_unreadable() -> None:
    off, _ = await judged(pod(SLICE_20), on=False)
    assert terms(off) is None
    assert (
        off["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu.sliced.units"]
        == "320000"
    )
    unqueued, _ = await judged(pod(SLICE_20, labels={}))
    assert terms(unqueued) is None
    blind, webhook = await judged(pod(SLICE_20), status=503)  # still folded, never denied
    assert terms(blind) is None
    assert webhook.pinned == 0
    folded, _ = await judged(pod(SLICE_20))
    checked, _ = await judged(folded, path=VALIDATE_PATH)  # the validator patches nothing
    assert checked is folded


async def test_the_surface_pins_only_where_labels_are_published_and_the_setting_is_on() -> None:
    config = KubeConfig("https://api.invalid", None, None, None, False, "default")

    async def never(path: str, body: Any) -> dict[str, Any]:
        raise AssertionError("not authorized here")

    async def no_summary(node: str) -> Any:
        raise AssertionError("no kubelet")

    found = {}
    async with KubeClient(config, transport=cluster()) as client, trio.open_nursery() as nursery:
        for published in (False, True):
            for setting in (False, True):
                surface = Surface(
                    sources=Sources(client, SummaryCache(no_summary, nursery)),
                    authenticator=lambda: None,  # type: ignore[arg-type,return-value]
                    authorizer=Authorizer(never, nursery),
                    settings=lambda s=setting: Settings(workload_fit_affinity=s),  # type: ignore[misc]
                    fit_labels=published,
                )
                build_app(surface)
                assert surface.admission is not None
                found[(published, setting)] = surface.admission.fit_affinity()
        nursery.cancel_scope.cancel()
    assert found == {(False, False): False, (False, True): False, (True, False): False,
                     (True, True): True}  # fmt: skip
