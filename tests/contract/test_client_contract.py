"""The client's write verbs against an API server: the semantics a controller relies on.

Expected values come from the Kubernetes API conventions (409 on a stale resourceVersion,
generation on spec changes only, finalizers holding a delete, ownerReference collection),
not from the stand-in's code; the same tests run against kind (see conftest).
"""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

import pytest
import trio
from contract_target import ON_A_CLUSTER, Target

from gpustack_kube.client import AlreadyExists, Conflict, Invalid, NotFound, PatchType


def cm(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def base(t: Target, plural: str = "configmaps") -> str:
    return f"/api/v1/namespaces/{t.namespace}/{plural}"


async def test_create_get_update_and_a_stale_update_conflicts(target: Target) -> None:
    c = target.client
    created = await c.create(base(target), cm("a", k="1"))
    assert created["metadata"]["uid"]
    assert created["metadata"]["creationTimestamp"]
    with pytest.raises(AlreadyExists):
        await c.create(base(target), cm("a"))
    fresh = await c.get(f"{base(target)}/a")
    fresh["data"]["k"] = "2"
    updated = await c.update(f"{base(target)}/a", fresh)
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    created["data"]["k"] = "3"  # written over the version before the update
    with pytest.raises(Conflict):
        await c.update(f"{base(target)}/a", created)
    assert (await c.get(f"{base(target)}/a"))["data"] == {"k": "2"}


async def test_generate_name(target: Target) -> None:
    body = cm("")
    body["metadata"] = {"generateName": "gen-"}
    made = await target.client.create(base(target), body)
    assert made["metadata"]["name"].startswith("gen-")
    assert len(made["metadata"]["name"]) == len("gen-") + 5


async def test_three_patch_types(target: Target) -> None:
    c = target.client
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "containers": [
                {"name": "a", "image": "busybox", "env": [{"name": "X", "value": "1"}]},
                {"name": "b", "image": "busybox"},
            ]
        },
    }
    path = f"{base(target, 'pods')}/p"
    await c.create(base(target, "pods"), pod)
    merged = await c.patch(path, {"metadata": {"labels": {"tier": "gold"}}})
    assert merged["metadata"]["labels"] == {"tier": "gold"}
    strategic = await c.patch(
        path,
        {"spec": {"containers": [{"name": "b", "image": "nginx"}]}},
        PatchType.STRATEGIC,
    )
    # Strategic merge keys containers by name: a keeps its env, b gets the new image.
    images = {x["name"]: x["image"] for x in strategic["spec"]["containers"]}
    assert images == {"a": "busybox", "b": "nginx"}
    json_patched = await c.patch(
        path,
        [{"op": "add", "path": "/metadata/annotations", "value": {"n": "1"}}],
        PatchType.JSON,
    )
    assert json_patched["metadata"]["annotations"] == {"n": "1"}
    with pytest.raises(Invalid):
        await c.patch(
            path, [{"op": "test", "path": "/metadata/name", "value": "q"}], PatchType.JSON
        )


@pytest.mark.skipif(
    ON_A_CLUSTER,
    reason="on a whole system the worker's webhook judges an Instance's spec and its controller "
    "writes the status this test writes; the bare stand-in holds the subresource's semantics",
)
async def test_status_subresource_and_generation(target: Target) -> None:
    c = target.client
    path = f"/apis/worker.gpustack.ai/v1alpha1/namespaces/{target.namespace}/instances"
    body = {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Instance",
        "metadata": {"name": "i"},
        "spec": {"image": "busybox"},
        "status": {"phase": "Ready"},
    }
    try:
        made = await c.create(path, body)
    except Invalid as exc:  # the CRD's schema decides what a spec needs; show it
        pytest.fail(f"the Instance CRD refused a minimal spec: {exc}")
    assert "status" not in made  # status on create is dropped with a status subresource
    assert made["metadata"]["generation"] == 1
    with_status = await c.patch(f"{path}/i/status", {"status": {"phase": "Starting"}})
    assert with_status["status"] == {"phase": "Starting"}
    assert with_status["metadata"]["generation"] == 1  # status is not spec
    relabelled = await c.patch(f"{path}/i", {"metadata": {"labels": {"a": "b"}}})
    assert relabelled["metadata"]["generation"] == 1
    changed = await c.patch(f"{path}/i", {"spec": {"image": "nginx"}, "status": {"phase": "Ready"}})
    assert changed["metadata"]["generation"] == 2
    assert changed["status"] == {"phase": "Starting"}  # the main resource ignores status


async def test_finalizers_hold_a_delete_until_removed(target: Target) -> None:
    c = target.client
    body = cm("f")
    body["metadata"]["finalizers"] = ["example.com/hold"]
    await c.create(base(target), body)
    held = await c.delete(f"{base(target)}/f")
    assert held["metadata"]["deletionTimestamp"]
    assert (await c.get(f"{base(target)}/f"))["metadata"]["deletionTimestamp"]
    await c.patch(f"{base(target)}/f", {"metadata": {"finalizers": None}})
    with pytest.raises(NotFound):
        await c.get(f"{base(target)}/f")


async def test_delete_preconditions(target: Target) -> None:
    c = target.client
    made = await c.create(base(target), cm("d"))
    with pytest.raises(Conflict):
        await c.delete(f"{base(target)}/d", preconditions={"uid": "not-the-uid"})
    await c.delete(f"{base(target)}/d", preconditions={"uid": made["metadata"]["uid"]})
    with pytest.raises(NotFound):
        await c.get(f"{base(target)}/d")


async def until_gone(target: Target, path: str) -> None:
    with trio.fail_after(30):
        while True:
            try:
                await target.client.get(path)
            except NotFound:
                return
            await trio.sleep(0.2)


@pytest.mark.parametrize("policy", ["Background", "Foreground"])
async def test_owner_references_are_collected(target: Target, policy: str) -> None:
    c = target.client
    owner = await c.create(base(target), cm("owner"))
    child = cm("child")
    child["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}
    ]
    await c.create(base(target), child)
    await c.delete(f"{base(target)}/owner", propagation_policy=policy)
    await until_gone(target, f"{base(target)}/child")
    await until_gone(target, f"{base(target)}/owner")


async def test_orphan_keeps_the_dependent(target: Target) -> None:
    c = target.client
    owner = await c.create(base(target), cm("owner"))
    child = cm("child")
    child["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}
    ]
    await c.create(base(target), child)
    await c.delete(f"{base(target)}/owner", propagation_policy="Orphan")
    await until_gone(target, f"{base(target)}/owner")
    kept = await c.get(f"{base(target)}/child")
    assert not kept["metadata"].get("ownerReferences")


async def test_watch_sees_every_write_and_resumes(target: Target) -> None:
    c = target.client
    listed = await c.get(base(target))
    start = listed["metadata"]["resourceVersion"]
    made = await c.create(base(target), cm("w"))
    await c.patch(f"{base(target)}/w", {"data": {"k": "v"}})
    await c.delete(f"{base(target)}/w")
    seen: list[str] = []
    with trio.fail_after(20):
        async with aclosing(
            c.watch(base(target), {"resourceVersion": start, "timeoutSeconds": 10})
        ) as events:
            async for event in events:
                if event["object"]["metadata"].get("name") == "w":
                    seen.append(event["type"])
                if len(seen) == 3:
                    break
    assert seen == ["ADDED", "MODIFIED", "DELETED"]
    assert made["metadata"]["name"] == "w"


@pytest.mark.skipif(
    ON_A_CLUSTER,
    reason="reads the Pod Running at once, as the stand-in runs it; on a cluster the scheduler "
    "and a kubelet run it later (test_real_control_plane.py shows kube-scheduler's placement)",
)
async def test_pod_with_node_selector_runs_on_the_matching_node(target: Target) -> None:
    c = target.client
    nodes = (await c.get("/api/v1/nodes"))["items"]
    wanted = nodes[-1]["metadata"]["name"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "sel"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": wanted},
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }
    await c.create(base(target, "pods"), pod)
    running = await c.get(f"{base(target, 'pods')}/sel")
    assert running["spec"]["nodeName"] == wanted
    assert running["status"]["phase"] == "Running"
    assert running["status"]["podIP"]
    assert running["status"]["containerStatuses"][0]["containerID"].startswith("containerd://")
    await c.delete(f"{base(target, 'pods')}/sel")
    await until_gone(target, f"{base(target, 'pods')}/sel")
