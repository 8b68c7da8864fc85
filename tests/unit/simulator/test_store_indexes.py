"""The store's indexes answer exactly what a scan of every object answered, in the same order.

A model kept by the test (a plain dict of what each write returned) is the brute force: sorted
by (kind, namespace, name) and filtered by the selectors, it is what ``Store.list`` returned
before the indexes. After any sequence of creates, replacements, in-place updates (labels
changed, Pods bound and rebound), deletes and re-creates, every list through an index must
equal it, for every namespace and every selector the API accepts.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import msgspec
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_simulator.cluster import store as store_module
from gpustack_simulator.cluster.routes.objects import list_body
from gpustack_simulator.cluster.selectors import (
    NOTHING,
    field_selector,
    label_selector,
    narrowing,
)
from gpustack_simulator.cluster.store import Event, Store, TooOld

KINDS = ("Pod", "ConfigMap")
NAMESPACES = ("ns1", "ns2", "")
NAMES = ("a", "b", "c", "p1", "p2", "z")
NODES = (None, "", "n1", "n2")
LABEL_VALUES = ("a", "b", "")
LABEL_SELECTORS = (
    "",
    "app=a",
    "app==b",
    "app=",
    "app",
    "!app",
    "app in (a,b)",
    "app in (b)",
    "app notin (a)",
    "app!=a",
    "tier=x,app",
    "app=a,app=b",
    "app=a,tier=x",
    "tier",
)
FIELD_SELECTORS = (
    "",
    "spec.nodeName=n1",
    "spec.nodeName==n2",
    "spec.nodeName=",
    "spec.nodeName!=n1",
    "metadata.name=p1",
    "metadata.name=a,spec.nodeName=n1",
    "metadata.namespace=ns1",
    "metadata.namespace=ns2,spec.nodeName=n2",
    "metadata.namespace=ns1,metadata.namespace=ns2",
    "status.phase=Running",
    "spec.nodeName=n1,spec.nodeName=n2",
)
LIST_NAMESPACES = (None, *NAMESPACES)

labels_strategy = st.dictionaries(
    st.sampled_from(("app", "tier", "x")), st.sampled_from(LABEL_VALUES), max_size=3
)


def _object(
    kind: str, namespace: str, name: str, labels: dict[str, str], node: str | None, phase: str
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if namespace:
        meta["namespace"] = namespace
    obj: dict[str, Any] = {"kind": kind, "metadata": meta}
    if kind == "Pod":
        obj["spec"] = {} if node is None else {"nodeName": node}
        obj["status"] = {"phase": phase}
    else:
        obj["data"] = {"k": phase}
    return obj


put_op = st.tuples(
    st.just("put"),
    st.sampled_from(KINDS),
    st.sampled_from(NAMESPACES),
    st.sampled_from(NAMES),
    labels_strategy,
    st.sampled_from(NODES),
    st.sampled_from(("Pending", "Running")),
)
update_op = st.tuples(
    st.just("update"),
    st.sampled_from(KINDS),
    st.sampled_from(NAMESPACES),
    st.sampled_from(NAMES),
    labels_strategy,
    st.sampled_from(NODES),
    st.sampled_from(("Pending", "Running")),
)
delete_op = st.tuples(
    st.just("delete"), st.sampled_from(KINDS), st.sampled_from(NAMESPACES), st.sampled_from(NAMES)
)
operations = st.lists(st.one_of(put_op, update_op, delete_op), max_size=60)

Model = dict[tuple[str, str, str], dict[str, Any]]


def _apply(store: Store, model: Model, op: tuple[Any, ...]) -> None:
    if op[0] == "put":
        _, kind, ns, name, labels, node, phase = op
        stored = store.put(kind, _object(kind, ns, name, labels, node, phase))
        model[(kind, ns, name)] = stored
    elif op[0] == "update":
        _, kind, ns, name, labels, node, phase = op

        def mutate(obj: dict[str, Any]) -> None:
            obj["metadata"]["labels"] = labels
            if kind == "Pod":  # bind, rebind or unbind
                if node is None:
                    obj["spec"].pop("nodeName", None)
                else:
                    obj["spec"]["nodeName"] = node
                obj["status"]["phase"] = phase

        if (kind, ns, name) in model:
            model[(kind, ns, name)] = store.update(kind, ns, name, mutate)
        else:
            with pytest.raises(KeyError):
                store.update(kind, ns, name, mutate)
    else:
        _, kind, ns, name = op
        gone = store.delete(kind, ns, name)
        assert (gone is None) == ((kind, ns, name) not in model)
        model.pop((kind, ns, name), None)


def _scan(model: Model, kind: str, namespace: str | None) -> list[dict[str, Any]]:
    """The list as the store computed it before the indexes: sort everything, filter."""
    return [
        obj
        for (k, ns, _), obj in sorted(model.items())
        if k == kind and (namespace is None or ns == namespace)
    ]


def _check(store: Store, model: Model) -> None:
    for kind in (*KINDS, "Node"):
        for namespace in LIST_NAMESPACES:
            scanned = _scan(model, kind, namespace)
            assert store.list(kind, namespace) == scanned
            assert [id(o) for o in store.list(kind, namespace)] == [id(o) for o in scanned]
            for labels in LABEL_SELECTORS:
                for fields in FIELD_SELECTORS:
                    match_labels, match_fields = label_selector(labels), field_selector(fields)
                    wanted = [o for o in scanned if match_labels(o) and match_fields(o)]
                    narrowed = store.candidates(kind, namespace, narrowing(labels, fields))
                    got = [o for o in narrowed if match_labels(o) and match_fields(o)]
                    assert [id(o) for o in got] == [id(o) for o in wanted], (
                        kind,
                        namespace,
                        labels,
                        fields,
                    )
                    # The candidates are an ordered subsequence of the scan.
                    positions = {id(o): i for i, o in enumerate(scanned)}
                    order = [positions[id(o)] for o in narrowed]
                    assert order == sorted(order)
                    assert len(set(order)) == len(order)
        for (k, ns, name), obj in model.items():
            if k == kind:
                assert store.get(kind, ns, name) is obj


@settings(max_examples=150, deadline=None)
@given(operations)
def test_indexed_lists_equal_the_scan(ops: list[tuple[Any, ...]]) -> None:
    store, model = Store(), {}
    for op in ops:
        _apply(store, model, op)
    _check(store, model)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.one_of(put_op, update_op, delete_op), max_size=8), max_size=6))
def test_indexes_hold_after_every_step(batches: list[list[tuple[Any, ...]]]) -> None:
    store, model = Store(), {}
    for batch in batches:
        for op in batch:
            _apply(store, model, op)
        _check(store, model)


def test_a_rebound_pod_moves_between_node_buckets() -> None:
    store = Store()
    store.put("Pod", _object("Pod", "ns1", "p1", {}, None, "Pending"))
    by_node = narrowing("", "spec.nodeName=n1")
    unbound = narrowing("", "spec.nodeName=")
    assert store.candidates("Pod", None, by_node) == []
    assert [o["metadata"]["name"] for o in store.candidates("Pod", None, unbound)] == ["p1"]
    store.update("Pod", "ns1", "p1", lambda o: o["spec"].update(nodeName="n1"))
    assert [o["metadata"]["name"] for o in store.candidates("Pod", None, by_node)] == ["p1"]
    assert store.candidates("Pod", None, unbound) == []
    store.update("Pod", "ns1", "p1", lambda o: o["spec"].update(nodeName="n2"))
    assert store.candidates("Pod", None, by_node) == []
    store.delete("Pod", "ns1", "p1")
    assert store.candidates("Pod", None, narrowing("", "spec.nodeName=n2")) == []


def test_labels_an_index_cannot_hold_fall_back_to_the_scan() -> None:
    store = Store()
    odd = _object("Pod", "ns1", "odd", {}, "n1", "Running")
    odd["metadata"]["labels"] = {"app": ["not", "a", "string"]}  # unhashable: not indexable
    store.put("Pod", odd)
    store.put("Pod", _object("Pod", "ns1", "fine", {"app": "a"}, "n1", "Running"))
    found = store.candidates("Pod", "ns1", narrowing("app", ""))
    assert [o["metadata"]["name"] for o in found] == ["fine", "odd"]  # the namespace's list
    store.delete("Pod", "ns1", "odd")
    found = store.candidates("Pod", "ns1", narrowing("app", ""))
    assert [o["metadata"]["name"] for o in found] == ["fine"]  # indexed again


def test_narrowing_reads_only_equality_terms() -> None:
    assert narrowing("", "") is NOTHING
    assert narrowing("app!=a,!tier,app notin (x)", "spec.nodeName!=n1") is NOTHING
    found = narrowing("app=a,tier==b,x,y in (1,2)", "spec.nodeName=n1,metadata.name=p")
    assert found.labels == (("app", "a"), ("tier", "b"))
    assert found.label_keys == ("x", "y")
    assert (found.node_name, found.name, found.namespace) == ("n1", "p", None)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(("put", "delete")), st.sampled_from(KINDS), st.sampled_from(NAMES)
        ),
        max_size=60,
    ),
    st.integers(min_value=-2, max_value=70),
)
def test_history_answers_as_the_bounded_deque_did(
    ops: list[tuple[str, str, str]], since: int
) -> None:
    history = 7
    saved = store_module.HISTORY
    store_module.HISTORY = history
    try:
        store = Store()
        reference: deque[Event] = deque(maxlen=history)
        for action, kind, name in ops:
            if action == "put":
                store.put(kind, {"metadata": {"name": name, "namespace": "ns"}})
            else:
                store.delete(kind, "ns", name)
            if store.version and (not reference or reference[-1].version != store.version):
                reference.append(store._events[-1])  # the event just made
        for kind in KINDS:
            too_old = bool(reference) and since < reference[0].version - 1 and since < store.version
            if too_old:
                with pytest.raises(TooOld):
                    store.events_since(kind, since)
            else:
                expected = [e for e in reference if e.kind == kind and e.version > since]
                assert list(store.events_since(kind, since)) == expected
    finally:
        store_module.HISTORY = saved


def test_a_memo_lasts_until_its_kind_changes() -> None:
    store, made = Store(), []

    def make() -> int:
        made.append(1)
        return len(made)

    assert store.memo("Pod", "k", make) == 1
    assert store.memo("Pod", "k", make) == 1
    store.put("ConfigMap", _object("ConfigMap", "ns1", "a", {}, None, "x"))
    assert store.memo("Pod", "k", make) == 1  # another kind's write keeps it
    store.put("Pod", _object("Pod", "ns1", "a", {}, None, "Pending"))
    assert store.memo("Pod", "k", make) == 2
    store.update("Pod", "ns1", "a", lambda o: o["spec"].update(nodeName="n1"))
    assert store.memo("Pod", "k", make) == 3
    store.delete("Pod", "ns1", "a")
    assert store.memo("Pod", "k", make) == 4


def test_a_spliced_list_body_is_the_bytes_json_response_wrote() -> None:
    items = [{"metadata": {"name": "a", "labels": {"x": "é"}}}, {"metadata": {"name": "b"}}]
    whole = {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "42"},
        "items": items,
    }
    assert list_body("PodList", "v1", 42, msgspec.json.encode(items)) == msgspec.json.encode(whole)


# -- The node simulator's and the garbage collector's buckets, and watch events by node -------

UIDS = ("u1", "u2", "u3", None)
gc_object = st.tuples(
    st.sampled_from(KINDS),
    st.sampled_from(NAMESPACES),
    st.sampled_from(NAMES),
    st.sampled_from(UIDS),
    st.booleans(),  # deletionTimestamp
    st.lists(st.sampled_from(UIDS), max_size=3),  # ownerReferences' UIDs
    st.sampled_from((None, "", "n1", "n2", 0)),  # spec.nodeName (0: false but not a string)
)


def _gc_object(spec: tuple[Any, ...]) -> dict[str, Any]:
    kind, ns, name, uid, deleting, owners, node = spec
    meta: dict[str, Any] = {"name": name}
    if ns:
        meta["namespace"] = ns
    if uid is not None:
        meta["uid"] = uid
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    if owners:
        meta["ownerReferences"] = [{"kind": "X", "name": "o", "uid": u} for u in owners]
    return {"kind": kind, "metadata": meta, "spec": {"nodeName": node}}


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(gc_object, delete_op), max_size=40))
def test_the_collectors_and_simulators_buckets_equal_the_scan(ops: list[tuple[Any, ...]]) -> None:
    store, model = Store(), {}
    for op in ops:
        if op[0] == "delete":
            _, kind, ns, name = op
            store.delete(kind, ns, name)
            model.pop((kind, ns, name), None)
        else:
            obj = _gc_object(op)
            model[(op[0], op[1], op[2])] = store.put(op[0], obj)
    for kind in (*KINDS, "Node"):
        scanned = _scan(model, kind, None)

        def ids(objects: list[dict[str, Any]]) -> list[int]:
            return [id(o) for o in objects]

        assert ids(store.deleting(kind)) == ids(
            [o for o in scanned if o["metadata"].get("deletionTimestamp")]
        )
        assert ids(store.unbound(kind)) == ids(
            [o for o in scanned if not o["spec"].get("nodeName")]
        )
        assert ids(store.gc_candidates(kind)) == ids(
            [
                o
                for o in scanned
                if o["metadata"].get("deletionTimestamp") or o["metadata"].get("ownerReferences")
            ]
        )
        for uid in UIDS:
            with_uid = [o for o in scanned if o["metadata"].get("uid") == uid]
            assert store.has_uid(kind, uid) == bool(with_uid)
            assert store.uid_in({kind, "Node"}, uid) == bool(with_uid)
            everywhere = [o for o in model.values() if o["metadata"].get("uid") == uid]
            assert store.uid_in(set(KINDS), uid) == bool(everywhere)
            if uid is not None:
                assert ids(store.with_uid(kind, uid)) == ids(with_uid)
            owned = store.owned_by(kind, uid)
            assert owned is not None
            assert ids(owned) == ids(
                [
                    o
                    for o in scanned
                    if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or ())
                ]
            )


def test_unreadable_owner_references_fall_back_to_the_scan() -> None:
    store = Store()
    odd = {"metadata": {"name": "odd", "ownerReferences": ["not-a-map"]}, "spec": {}}
    store.put("Pod", odd)
    store.put("Pod", {"metadata": {"name": "plain"}, "spec": {"nodeName": "n1"}})
    assert store.owned_by("Pod", "u1") is None
    assert [o["metadata"]["name"] for o in store.gc_candidates("Pod")] == ["odd", "plain"]
    store.delete("Pod", "", "odd")
    assert store.owned_by("Pod", "u1") == []
    assert store.gc_candidates("Pod") == []


node_event_op = st.one_of(
    st.tuples(
        st.just("put"),
        st.sampled_from(KINDS),
        st.sampled_from(NAMES),
        st.sampled_from(("n1", "n2", "", None, "bad")),
    ),
    st.tuples(st.just("delete"), st.sampled_from(KINDS), st.sampled_from(NAMES), st.none()),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(node_event_op, max_size=60), st.integers(min_value=0, max_value=60))
def test_node_events_are_the_events_a_node_watch_can_match(
    ops: list[tuple[Any, ...]], since: int
) -> None:
    """Every event of the kind after ``since`` that is on the node (or unreadable), in order;
    ``TooOld`` only when one of those left the history."""
    history = 7
    saved = store_module.HISTORY
    store_module.HISTORY = history
    try:
        store, every = Store(), []
        for action, kind, name, node in ops:
            if action == "put":
                spec: Any = (
                    "not-a-map" if node == "bad" else ({} if node is None else {"nodeName": node})
                )
                store.put(kind, {"metadata": {"name": name, "namespace": "ns"}, "spec": spec})
            else:
                store.delete(kind, "ns", name)
            if store.version and (not every or every[-1].version != store.version):
                every.append(store._events[-1])
        kept = {e.version for e in store._events}
        for kind in KINDS:
            for node in ("n1", "n2", ""):

                def on_node(event: Event, node: str = node) -> bool:
                    spec = event.object.get("spec")
                    if not isinstance(spec, dict):
                        return True  # unreadable: every node's watch reads it
                    return str(spec.get("nodeName", "")) == node

                wanted = [e for e in every if e.kind == kind and e.version > since and on_node(e)]
                if any(e.version not in kept for e in wanted):
                    with pytest.raises(TooOld):
                        store.node_events_since(kind, node, since)
                else:
                    assert store.node_events_since(kind, node, since) == wanted
    finally:
        store_module.HISTORY = saved


async def test_a_node_watch_wakes_for_its_node_and_for_unreadable_nodes_only() -> None:
    store = Store()
    woken: list[str] = []

    async def wait(node: str) -> None:
        await store.wait_changed("Pod", node)
        woken.append(node)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait, "n1")
        nursery.start_soon(wait, "n2")
        await trio.testing.wait_all_tasks_blocked()
        store.put("Pod", {"metadata": {"name": "a"}, "spec": {"nodeName": "n2"}})
        store.put("ConfigMap", {"metadata": {"name": "a"}, "spec": {"nodeName": "n1"}})
        await trio.testing.wait_all_tasks_blocked()
        assert woken == ["n2"]
        store.put("Pod", {"metadata": {"name": "b"}, "spec": "unreadable"})
        await trio.testing.wait_all_tasks_blocked()
        assert woken == ["n2", "n1"]
