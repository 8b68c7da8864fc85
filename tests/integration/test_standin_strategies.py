"""The stand-in's per-kind write rules (``cluster/strategies``) answer as kube-apiserver does.

The differential suite (``tests/contract/test_differential.py``) holds the stand-in to answers
recorded from a real kube-apiserver; these are the neighbouring rules the same fixes brought in,
each expected answer kube-apiserver's own (apimachinery's validators, ``ValidatePodSpec``,
``ValidateResourceRequirements``, the structural schema's list types and ``oneOf``, field
validation), in its words where the stand-in words them alike. Raw HTTP as the admin, so the
status, the ``Status`` body and the ``Warning`` headers are what a client sees.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpustack_simulator.testing import cluster_standin

NS = "rules"
CMS = f"/api/v1/namespaces/{NS}/configmaps"
PODS = f"/api/v1/namespaces/{NS}/pods"
SERVICES = f"/api/v1/namespaces/{NS}/services"
EVENTS = f"/api/v1/namespaces/{NS}/events"
INSTANCES = f"/apis/worker.gpustack.ai/v1alpha1/namespaces/{NS}/instances"
WIDGETS = f"/apis/example.com/v1/namespaces/{NS}/widgets"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with cluster_standin("nvidia-mixed", tmp_path) as cluster:
        token = next(u.token for u in cluster.state.expanded.users if u.name == "admin")
        context = ssl.create_default_context(cafile=str(cluster.state.pki.ca))
        async with httpx.AsyncClient(
            base_url=cluster.url,
            verify=context,
            headers={"Authorization": f"Bearer {token}"},
            trust_env=False,
        ) as client:
            made = await client.post("/api/v1/namespaces", json=namespace(NS))
            assert made.status_code == 201, made.text
            yield client


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def configmap(name: str, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, **meta}}


def pod(name: str, *containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    listed = list(containers) or [{"name": "main", "image": "busybox"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": listed, **spec}}  # fmt: skip


def limited(limits: dict[str, str], requests: dict[str, str] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {"limits": limits}
    if requests is not None:
        resources["requests"] = requests
    return {"name": "main", "image": "busybox", "resources": resources}


def instance(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "worker.gpustack.ai/v1alpha1", "kind": "Instance",
            "metadata": {"name": name}, "spec": {"image": "ubuntu:24.04", **spec}}  # fmt: skip


def refusal(response: httpx.Response, code: int = 422) -> str:
    """The refusal's message, once its status and reason are the API server's."""
    assert response.status_code == code, response.text
    body = response.json()
    assert body["reason"] == {422: "Invalid", 400: "BadRequest"}[code]
    return str(body["message"])


# -- object meta: every kind -------------------------------------------------------------------

LABEL_VALUE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
NAME_PART = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used "
    "for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({"x": "a/b"}, f'metadata.labels: Invalid value: "a/b": {LABEL_VALUE}'),
        ({"x": "v" * 64}, f'metadata.labels: Invalid value: "{"v" * 64}": must be no more than 63'),
        ({"bad key": "v"}, f'metadata.labels: Invalid value: "bad key": {NAME_PART}'),
        ({"Example.com/x": "v"}, 'metadata.labels: Invalid value: "Example.com/x": prefix part a '
                                 "lowercase RFC 1123 subdomain must consist of"),
        ({"/x": "v"}, 'metadata.labels: Invalid value: "/x": prefix part must be non-empty'),
        ({"a/b/c": "v"}, 'metadata.labels: Invalid value: "a/b/c": a qualified name must '
                         "consist of"),
    ],
)  # fmt: skip
async def test_labels_of_every_kind_are_qualified_names_with_label_values(
    api: httpx.AsyncClient, labels: dict[str, str], expected: str
) -> None:
    message = refusal(await api.post(CMS, json=configmap("labelled", labels=labels)))
    assert expected in message
    refused = await api.post(INSTANCES, json=instance("labelled") | {"metadata": {
        "name": "labelled", "labels": labels}})  # fmt: skip
    assert expected in refusal(refused)
    assert (await api.get(f"{CMS}/labelled")).status_code == 404


async def test_valid_labels_and_an_empty_value_are_stored(api: httpx.AsyncClient) -> None:
    labels = {"example.com/Name_1.x": "My_value-1", "empty": "", "k": "v" * 63}
    made = await api.post(CMS, json=configmap("fine", labels=labels))
    assert made.status_code == 201, made.text
    assert made.json()["metadata"]["labels"] == labels


async def test_annotations_are_qualified_names_in_lower_case_and_256_kib_in_all(
    api: httpx.AsyncClient,
) -> None:
    fine = await api.post(CMS, json=configmap("cased", annotations={"Example.com/Key": "v"}))
    assert fine.status_code == 201, fine.text  # the prefix is compared in lower case
    bad = refusal(await api.post(CMS, json=configmap("a1", annotations={"bad key": "v"})))
    assert f'metadata.annotations: Invalid value: "bad key": {NAME_PART}' in bad
    huge = {"a": "x" * (256 * 1024)}  # one byte over with its key
    too_long = refusal(await api.post(CMS, json=configmap("a2", annotations=huge)))
    assert "metadata.annotations: Too long: may not be more than 262144 bytes" in too_long


@pytest.mark.parametrize(
    ("path", "body", "expected"),
    [
        (SERVICES, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "1abc"},
                    "spec": {"ports": [{"port": 80}]}},
         'metadata.name: Invalid value: "1abc": a DNS-1035 label must consist of lower case '
         "alphanumeric characters or '-', start with an alphabetic character, and end with an "
         "alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is "
         "'[a-z]([-a-z0-9]*[a-z0-9])?')"),
        ("/api/v1/namespaces", namespace("a.b"), 'metadata.name: Invalid value: "a.b"'),
        (CMS, configmap("a..b"), 'metadata.name: Invalid value: "a..b": a lowercase RFC 1123 '
                                 "subdomain must consist of"),
        (CMS, configmap("x" * 254), "must be no more than 253 characters"),
        (CMS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "Gen-"}},
         'metadata.generateName: Invalid value: "Gen-"'),
    ],
)  # fmt: skip
async def test_each_kind_has_its_name_rule(
    api: httpx.AsyncClient, path: str, body: dict[str, Any], expected: str
) -> None:
    assert expected in refusal(await api.post(path, json=body))


async def test_a_v1_event_is_not_held_to_the_name_rules(api: httpx.AsyncClient) -> None:
    # core/v1 Events pass only the legacy Event checks: the worker names its Events "<obj>.".
    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"generateName": "ws."},
             "involvedObject": {"kind": "Instance", "name": "ws", "namespace": NS},
             "reason": "Created", "message": "m", "type": "Normal"}  # fmt: skip
    made = await api.post(EVENTS, json=event)
    assert made.status_code == 201, made.text
    assert made.json()["metadata"]["name"].startswith("ws.")


# -- a Pod's spec ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (pod("neg", limited({"cpu": "-1"})),
         'spec.containers[0].resources.limits[cpu]: Invalid value: "-1": must be greater than or '
         "equal to 0"),
        (pod("over", limited({"cpu": "1"}, {"cpu": "2"})),
         'spec.containers[0].resources.requests: Invalid value: "2": must be less than or equal '
         "to cpu limit of 1"),
        (pod("unequal", limited({"example.com/foo": "2"}, {"example.com/foo": "1"})),
         'spec.containers[0].resources.requests: Invalid value: "1": must be equal to '
         "example.com/foo limit of 2"),
        (pod("nolimit", {"name": "main", "image": "busybox",
                         "resources": {"requests": {"example.com/foo": "1"}}}),
         "spec.containers[0].resources.limits: Required value: Limit must be set for non "
         "overcommitable resources"),
        (pod("frac", limited({"example.com/foo": "0.5"})),
         'spec.containers[0].resources.limits[example.com/foo]: Invalid value: "500m": must be '
         "an integer"),
        (pod("twice", {"name": "c", "image": "busybox"}, {"name": "c", "image": "busybox"}),
         'spec.containers[1].name: Duplicate value: "c"'),
        (pod("init", {"name": "c", "image": "busybox"},
             initContainers=[{"name": "c", "image": "busybox"}]),
         'spec.containers[0].name: Duplicate value: "c"'),
        (pod("vols", volumes=[{"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}]),
         'spec.volumes[1].name: Duplicate value: "v"'),
        (pod("nomount", {"name": "main", "image": "busybox",
                         "volumeMounts": [{"name": "gone", "mountPath": "/x"}]}),
         'spec.containers[0].volumeMounts[0].name: Not found: "gone"'),
    ],
)  # fmt: skip
async def test_a_pod_spec_the_server_refuses(
    api: httpx.AsyncClient, body: dict[str, Any], expected: str
) -> None:
    assert expected in refusal(await api.post(PODS, json=body))


async def test_several_refusals_are_one_aggregate_as_apimachinery_words_it(
    api: httpx.AsyncClient,
) -> None:
    message = refusal(await api.post(PODS, json=pod("Two", limited({"cpu": "-1"}))))
    assert message.startswith('Pod "Two" is invalid: [metadata.name: Invalid value: "Two": ')
    assert ', spec.containers[0].resources.limits[cpu]: Invalid value: "-1"' in message
    assert message.endswith("]")


async def test_a_request_left_out_defaults_to_its_limit_on_update_too(
    api: httpx.AsyncClient,
) -> None:
    made = await api.post(PODS, json=pod("same", limited({"cpu": "1", "example.com/foo": "2"})))
    assert made.status_code == 201, made.text
    stored = made.json()
    assert stored["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "1", "example.com/foo": "2"}  # fmt: skip
    del stored["spec"]["containers"][0]["resources"]["requests"]
    stored["metadata"]["labels"] = {"seen": "yes"}
    # The server defaults the body before comparing specs: no resources change, no refusal.
    replaced = await api.put(f"{PODS}/same", json=stored)
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "1"


# -- bodies a patch type cannot decode ---------------------------------------------------------


async def test_a_patch_body_of_the_wrong_shape_is_a_bad_request(api: httpx.AsyncClient) -> None:
    assert (await api.post(CMS, json=configmap("p"))).status_code == 201
    for content_type, body in ((MERGE, "[]"), (MERGE, '"x"'), (JSON_PATCH, '{"op": "add"}'),
                               (JSON_PATCH, "[1]")):  # fmt: skip
        answer = await api.patch(f"{CMS}/p", content=body, headers={"Content-Type": content_type})
        refusal(answer, 400)
    # One that decodes but cannot be applied is the patch's own 422.
    missing = [{"op": "remove", "path": "/data/none"}]
    answer = await api.patch(f"{CMS}/p", json=missing, headers={"Content-Type": JSON_PATCH})
    assert answer.status_code == 422, answer.text


# -- a custom resource's schema and field validation ---------------------------------------


async def test_an_unknown_field_is_refused_warned_of_or_ignored_as_asked(
    api: httpx.AsyncClient,
) -> None:
    strict = await api.post(INSTANCES, json=instance("s", bogus=1, ports=[{"port": 22, "x": 1}]),
                            params={"fieldValidation": "Strict"})  # fmt: skip
    message = refusal(strict, 400)
    assert message.startswith(
        'Instance in version "v1alpha1" cannot be handled as a Instance: strict decoding error: '
    )
    assert 'unknown field "spec.bogus"' in message
    assert 'unknown field "spec.ports[0].x"' in message
    assert (await api.get(f"{INSTANCES}/s")).status_code == 404

    warned = await api.post(INSTANCES, json=instance("w", bogus=1))  # Warn: the default
    assert warned.status_code == 201, warned.text
    assert warned.headers.get_list("Warning") == ['299 - "unknown field \\"spec.bogus\\""']
    assert "bogus" not in warned.json()["spec"]

    ignored = await api.post(INSTANCES, json=instance("i", bogus=1),
                             params={"fieldValidation": "Ignore"})  # fmt: skip
    assert ignored.status_code == 201, ignored.text
    assert "Warning" not in ignored.headers
    assert "bogus" not in ignored.json()["spec"]

    patched = await api.patch(f"{INSTANCES}/i", json={"spec": {"bogus": 2}},
                              headers={"Content-Type": MERGE},
                              params={"fieldValidation": "Strict"})  # fmt: skip
    assert refusal(patched, 400) == 'strict decoding error: unknown field "spec.bogus"'

    unknown = await api.post(INSTANCES, json=instance("u"), params={"fieldValidation": "Loud"})
    assert 'fieldValidation: Unsupported value: "Loud"' in refusal(unknown)


async def test_a_known_body_is_neither_refused_nor_warned_of(api: httpx.AsyncClient) -> None:
    made = await api.post(INSTANCES, json=instance("k", ports=[{"port": 22}]),
                          params={"fieldValidation": "Strict"})  # fmt: skip
    assert made.status_code == 201, made.text
    assert "Warning" not in made.headers


WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
            "openAPIV3Schema": {"type": "object", "properties": {"spec": {
                "type": "object",
                "properties": {
                    "tags": {"type": "array", "x-kubernetes-list-type": "set",
                             "items": {"type": "string"}},
                    "source": {"type": "object",
                               "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                               "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
                },
            }}},
        }}],
    },
}  # fmt: skip


def widget(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name},
            "spec": spec}  # fmt: skip


async def test_a_crd_schema_s_set_and_one_of(api: httpx.AsyncClient) -> None:
    made = await api.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                          json=WIDGET_CRD)  # fmt: skip
    assert made.status_code == 201, made.text
    twice = refusal(await api.post(WIDGETS, json=widget("t", tags=["x", "y", "x"])))
    assert 'spec.tags[2]: Duplicate value: "x"' in twice
    none = refusal(await api.post(WIDGETS, json=widget("n", source={})))
    assert (
        '<nil>: Invalid value: "": "spec.source" must validate one and only one schema (oneOf). '
        "Found none valid"
    ) in none
    both = refusal(await api.post(WIDGETS, json=widget("b", source={"a": "1", "b": "2"})))
    assert '"spec.source" must validate one and only one schema (oneOf). Found 2 valid' in both
    fine = await api.post(WIDGETS, json=widget("f", tags=["x", "y"], source={"b": "2"}))
    assert fine.status_code == 201, fine.text
