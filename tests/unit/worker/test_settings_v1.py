"""The ``Setting`` resource's pure half: objects from the Secret, writes to a Secret patch.

Expected shapes come from the reference (``shared/reference/instancetypes.md``, "Settings the
chain reads": ``gpustack.ai/v1``, namespaced, ``spec.value``, ``kubectl patch setting <name>
--type merge -p '{"spec":{"value":"false"}}'``) and from Kubernetes' own wording for 404, 409,
422 and field selectors; base64 is computed here with the standard library.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpustack_core.settings import BY_NAME, KEYS
from gpustack_core.status import StatusError
from gpustack_worker import settings_v1
from gpustack_worker.settings_api import default_texts

NS = "gpustack-system"
KEY = BY_NAME["instance-privileged-allowed"]


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


SECRET: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {
        "name": "gpustack-settings",
        "namespace": NS,
        "resourceVersion": "4711",
        "uid": "6f1c2f3e-0000-4000-8000-000000000001",
        "creationTimestamp": "2026-12-01T10:00:00Z",
    },
    "data": {
        "instance-privileged-allowed": b64("true"),
        "instance-cpu-overcommit": b64("2"),
        "stray-key": b64("kept out of the catalog"),
    },
}


def view() -> settings_v1.SecretView:
    return settings_v1.secret_view(SECRET)


def current(key_name: str = KEY.name) -> dict[str, Any]:
    shown = view()
    return settings_v1.setting(BY_NAME[key_name], shown, NS, default_texts(shown.texts))


def refusal(call: Any, *args: Any) -> StatusError:
    with pytest.raises(StatusError) as caught:
        call(*args)
    return caught.value


# -- rendering ------------------------------------------------------------------------------


def test_a_setting_is_its_key_of_the_secret() -> None:
    assert current() == {
        "apiVersion": "gpustack.ai/v1",
        "kind": "Setting",
        "metadata": {
            "name": "instance-privileged-allowed",
            "namespace": NS,
            "resourceVersion": "4711",
            "uid": current()["metadata"]["uid"],
            "creationTimestamp": "2026-12-01T10:00:00Z",
        },
        "spec": {"value": "true"},
    }


def test_uids_are_stable_per_secret_and_key() -> None:
    assert current()["metadata"]["uid"] == current()["metadata"]["uid"]
    assert current()["metadata"]["uid"] != current("instance-cpu-overcommit")["metadata"]["uid"]


def test_the_list_is_the_catalog_in_order_with_the_secret_values_or_the_defaults() -> None:
    shown = view()
    listed = settings_v1.setting_list(shown, NS, default_texts(shown.texts), "9000")
    assert listed["kind"] == "SettingList"
    assert listed["apiVersion"] == "gpustack.ai/v1"
    assert listed["metadata"] == {"resourceVersion": "9000"}
    names = [item["metadata"]["name"] for item in listed["items"]]
    assert names == [key.name for key in KEYS]  # the catalog; the Secret's stray key is not one
    values = {item["metadata"]["name"]: item["spec"]["value"] for item in listed["items"]}
    assert values["instance-privileged-allowed"] == "true"  # from the Secret
    assert values["instance-cpu-overcommit"] == "2"
    assert values["instance-host-path-volume-allowed"] == "false"  # absent: the default
    assert values["workload-fit-affinity"] == "true"


def test_no_secret_yet_shows_the_defaults_without_a_version() -> None:
    shown = settings_v1.secret_view(None)
    obj = settings_v1.setting(KEY, shown, NS, default_texts(shown.texts))
    assert obj["spec"] == {"value": "false"}
    assert obj["metadata"] == {"name": KEY.name, "namespace": NS}


def test_the_table_prints_name_value_description_and_age() -> None:
    now = datetime(2026, 12, 1, 10, 5, 0, tzinfo=UTC)
    table = settings_v1.table([current()], "v1", {"resourceVersion": "9000"}, now=now)
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name", "Value", "Description", "Age"]  # fmt: skip
    assert table["kind"] == "Table"
    assert table["apiVersion"] == "meta.k8s.io/v1"
    assert table["metadata"] == {"resourceVersion": "9000"}
    (row,) = table["rows"]
    assert row["cells"] == [
        "instance-privileged-allowed",
        "true",
        "whether an Instance may take spec.privileged (the container escape)",
        "5m",
    ]
    assert row["object"]["kind"] == "PartialObjectMetadata"
    assert row["object"]["metadata"]["name"] == "instance-privileged-allowed"


# -- names and selectors --------------------------------------------------------------------


def test_an_unknown_name_is_404_in_the_api_servers_words() -> None:
    error = refusal(settings_v1.known_key, "no-such-setting")
    assert error.code == 404
    assert error.message == 'settings.gpustack.ai "no-such-setting" not found'
    assert settings_v1.known_key("workload-fit-affinity") is BY_NAME["workload-fit-affinity"]


def test_field_selectors_on_name_and_namespace() -> None:
    only = settings_v1.field_selector("metadata.name=workload-fit-affinity")
    assert only.keep("workload-fit-affinity", NS)
    assert not only.keep("instance-privileged-allowed", NS)
    assert only.name == "workload-fit-affinity"
    others = settings_v1.field_selector(
        "metadata.name!=workload-fit-affinity,metadata.namespace==x"
    )
    assert others.keep("instance-privileged-allowed", "x")
    assert not others.keep("instance-privileged-allowed", NS)
    assert not others.keep("workload-fit-affinity", "x")
    assert others.name == ""
    assert settings_v1.field_selector("").keep("anything", "anywhere")


def test_other_field_selectors_and_any_label_selector_are_refused() -> None:
    error = refusal(settings_v1.field_selector, "spec.value=true")
    assert error.code == 400
    assert 'field label not supported: "spec.value"' in error.message
    assert refusal(settings_v1.field_selector, "metadata.name").code == 400
    assert refusal(settings_v1.label_selector, "app=x").code == 400
    settings_v1.label_selector("")


# -- writes ---------------------------------------------------------------------------------


def test_the_walkthroughs_merge_patch_becomes_one_key_of_the_secret() -> None:
    patch = {"spec": {"value": "false"}}
    want = settings_v1.wanted(KEY, current(), settings_v1.merge_patch(current(), patch))
    assert settings_v1.secret_patch(want, "4711") == {
        "metadata": {"resourceVersion": "4711"},
        "data": {"instance-privileged-allowed": b64("false")},
    }


def test_a_resource_version_the_caller_sends_is_the_precondition() -> None:
    patch = {"metadata": {"resourceVersion": "4000"}, "spec": {"value": "false"}}
    want = settings_v1.wanted(KEY, current(), settings_v1.merge_patch(current(), patch))
    assert want.resource_version == "4000"
    assert settings_v1.secret_patch(want, "4711")["metadata"] == {"resourceVersion": "4000"}


def test_a_value_the_key_cannot_take_is_422_with_the_parsers_line_naming_the_key() -> None:
    patch = {"spec": {"value": "maybe"}}
    error = refusal(settings_v1.wanted, KEY, current(), settings_v1.merge_patch(current(), patch))
    assert error.code == 422
    assert error.reason == "Invalid"
    assert error.message == (
        'Setting.gpustack.ai "instance-privileged-allowed" is invalid: spec.value: Invalid '
        "value: 'maybe': instance-privileged-allowed: 'maybe' is not a boolean (true or false)"
    )
    cidrs = BY_NAME["instance-isolation-pod-cidrs"]
    bad = {"spec": {"value": "10.0.0.1/8"}}
    error = refusal(settings_v1.wanted, cidrs, current(cidrs.name),
                    settings_v1.merge_patch(current(cidrs.name), bad))  # fmt: skip
    assert error.code == 422
    assert "instance-isolation-pod-cidrs: '10.0.0.1/8'" in error.message


def test_a_value_that_is_no_string_is_422_saying_to_quote_it() -> None:
    patch = {"spec": {"value": False}}
    error = refusal(settings_v1.wanted, KEY, current(), settings_v1.merge_patch(current(), patch))
    assert error.code == 422
    assert "spec.value: Invalid value: false: must be a string" in error.message


def test_removing_the_value_is_422_required() -> None:
    patch = {"spec": {"value": None}}
    error = refusal(settings_v1.wanted, KEY, current(), settings_v1.merge_patch(current(), patch))
    assert error.code == 422
    assert error.message.endswith("spec.value: Required value")


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"metadata": {"labels": {"a": "b"}}}, "metadata.labels"),
        ({"metadata": {"name": "workload-fit-affinity"}}, "metadata.name"),
        ({"spec": {"other": "x"}}, "spec.other"),
        ({"status": {"x": 1}}, "status"),
        ({"kind": "Secret"}, "kind"),
    ],
)
def test_anything_but_the_value_is_422_naming_the_field(patch: dict[str, Any], field: str) -> None:
    error = refusal(settings_v1.wanted, KEY, current(), settings_v1.merge_patch(current(), patch))
    assert error.code == 422
    assert f"is invalid: {field}: Forbidden: only spec.value of a Setting can change" in (
        error.message
    )


def test_an_update_may_leave_out_what_the_server_sets() -> None:
    body = {"metadata": {"name": KEY.name}, "spec": {"value": "false"}}
    want = settings_v1.updated(KEY, current(), body, NS)
    assert (want.value, want.resource_version) == ("false", "")
    whole = {**current(), "spec": {"value": "1"}}
    want = settings_v1.updated(KEY, current(), whole, NS)
    assert (want.value, want.resource_version) == ("1", "4711")


@pytest.mark.parametrize(
    "body",
    [
        {"metadata": {"name": "workload-fit-affinity"}, "spec": {"value": "false"}},
        {"metadata": {"namespace": "default"}, "spec": {"value": "false"}},
        {"kind": "Secret", "spec": {"value": "false"}},
        {"apiVersion": "v1", "spec": {"value": "false"}},
        ["not", "an", "object"],
    ],
)
def test_an_update_naming_another_object_is_400(body: object) -> None:
    assert refusal(settings_v1.updated, KEY, current(), body, NS).code == 400


def test_merge_patch_is_rfc_7386() -> None:
    target = {"a": "b", "c": {"d": "e", "f": "g"}}
    patch = {"a": "z", "c": {"f": None}}
    assert settings_v1.merge_patch(target, patch) == {"a": "z", "c": {"d": "e"}}
    assert settings_v1.merge_patch({"a": "b"}, ["c"]) == ["c"]
    assert settings_v1.merge_patch({"a": [{"b": "c"}]}, {"a": [1]}) == {"a": [1]}


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(
    key=st.sampled_from(KEYS),
    patch=st.dictionaries(st.sampled_from(["spec", "metadata", "kind", "x"]), JSON, max_size=3)
    | st.fixed_dictionaries({"spec": st.fixed_dictionaries({"value": JSON})}),
)
def test_any_merge_patch_is_a_one_key_secret_patch_or_a_4xx(key: Any, patch: Any) -> None:
    before = current(key.name)
    try:
        want = settings_v1.wanted(key, before, settings_v1.merge_patch(before, patch))
    except StatusError as error:
        refused = error
    else:
        refused = None
    if refused is not None:
        assert 400 <= refused.code < 500
        assert "\n" not in refused.message
        return
    body = settings_v1.secret_patch(want, "4711")
    assert list(body["data"]) == [key.name]
    written = base64.b64decode(body["data"][key.name]).decode()
    key.parse(written)  # only a value the key can take is ever written
    assert written == want.value


# -- watch ----------------------------------------------------------------------------------


def test_a_secret_event_sends_only_the_settings_that_moved() -> None:
    before = default_texts(view().texts)
    moved = json.loads(json.dumps(SECRET))
    moved["metadata"]["resourceVersion"] = "4712"
    moved["data"]["workload-fit-affinity"] = b64("false")
    shown = settings_v1.secret_view(moved)
    keep = settings_v1.field_selector("").keep
    events = settings_v1.watch_events(shown, NS, default_texts(shown.texts), before, keep)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("MODIFIED", "workload-fit-affinity")]  # fmt: skip
    assert events[0]["object"]["spec"] == {"value": "false"}
    assert events[0]["object"]["metadata"]["resourceVersion"] == "4712"
    # Resuming from the caller's own version, what it saw is unknown: every Setting is sent.
    unknown = settings_v1.watch_events(shown, NS, default_texts(shown.texts), None, keep)
    assert len(unknown) == len(KEYS)
    one = settings_v1.field_selector("metadata.name=instance-cpu-overcommit").keep
    assert len(settings_v1.watch_events(shown, NS, default_texts(shown.texts), None, one)) == 1
