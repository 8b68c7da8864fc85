"""Selectors and the object store: the pieces of the stand-in with rules of their own."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from gpustack_simulator.cluster.selectors import SelectorError, field_selector, label_selector
from gpustack_simulator.cluster.store import HISTORY, Store, TooOld


def pod(name: str, node: str = "n1", **labels: str) -> dict[str, object]:
    return {
        "metadata": {"name": name, "namespace": "ns", "labels": labels},
        "spec": {"nodeName": node},
        "status": {"phase": "Running"},
    }


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=a", {"p1"}),
        ("app==a", {"p1"}),
        ("app!=a", {"p2", "p3"}),
        ("app in (a,b)", {"p1", "p2"}),
        ("app notin (a, b)", {"p3"}),
        ("tier", {"p1"}),
        ("!tier", {"p2", "p3"}),
        ("app in (a,b),tier=gpu", {"p1"}),
        ("", {"p1", "p2", "p3"}),
    ],
)
def test_label_selector(selector: str, expected: set[str]) -> None:
    objs = [pod("p1", app="a", tier="gpu"), pod("p2", app="b"), pod("p3")]
    match = label_selector(selector)
    assert {o["metadata"]["name"] for o in objs if match(o)} == expected  # type: ignore[index]


def test_field_selector_by_node_and_phase() -> None:
    objs = [pod("p1", node="n1"), pod("p2", node="n2")]
    match = field_selector("spec.nodeName=n2,status.phase!=Failed")
    assert [o["metadata"]["name"] for o in objs if match(o)] == ["p2"]  # type: ignore[index]


@pytest.mark.parametrize("text", ["spec.unknown=x", "spec.nodeName"])
def test_field_selector_rejects_what_the_api_server_does(text: str) -> None:
    with pytest.raises(SelectorError):
        field_selector(text)


def test_label_selector_rejects_garbage() -> None:
    with pytest.raises(SelectorError, match="unable to parse requirement"):
        label_selector("a in b")


async def test_store_versions_events_and_history() -> None:
    store = Store()
    first = store.put("Pod", pod("p1"))
    assert first["metadata"]["resourceVersion"] == "1"
    store.update("Pod", "ns", "p1", lambda o: o["metadata"]["labels"].update(x="y"))
    store.delete("Pod", "ns", "p1")
    assert [(e.type, e.version) for e in store.events_since("Pod", 0)] == [
        ("ADDED", 1),
        ("MODIFIED", 2),
        ("DELETED", 3),
    ]
    assert list(store.events_since("Pod", 3)) == []
    assert store.get("Pod", "ns", "p1") is None
    for i in range(HISTORY + 5):
        store.put("Pod", pod(f"q{i}"))
    with pytest.raises(TooOld):
        store.events_since("Pod", 1)


async def test_wait_changed_wakes_on_the_next_change(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The deadline is virtual: it fails a waiter left asleep, never a slow machine."""
    store = Store()
    woke = trio.Event()

    async def waiter() -> None:
        await store.wait_changed()
        woke.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert not woke.is_set()
        store.put("Pod", pod("p1"))
        with trio.fail_after(1):
            await woke.wait()
