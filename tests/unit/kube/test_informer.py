"""The informer against a scripted API server, with time under the test's control.

Time is a ``MockClock`` that moves only when a test jumps it, so "not before 1 s, at 1 s"
is checked exactly; ``settle`` lets every task run until all are blocked again.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from gpustack_kube.client import KubeClient
from gpustack_kube.config import KubeConfig
from gpustack_kube.informer import Backoff, Informer

CONFIG = KubeConfig("https://api.test", "secret", None, None, False, "default")
PATH = "/api/v1/pods"
NO_JITTER = Backoff(initial=1.0, maximum=8.0, factor=2.0, jitter=0.0)


def pod(name: str, version: int, namespace: str = "team-a", **labels: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "resourceVersion": str(version),
            "labels": labels,
        },
        "spec": {"nodeName": "n1"},
    }


def status(code: int, reason: str, message: str = "") -> dict[str, Any]:
    return {
        "kind": "Status",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


class WatchStream(httpx.AsyncByteStream):
    """One open watch: the test sends events into it and ends it."""

    def __init__(self, params: dict[str, str]) -> None:
        self.params = params
        self._send, self._receive = trio.open_memory_channel[bytes](100)
        self.closed = False

    def event(self, kind: str, obj: dict[str, Any]) -> None:
        self.raw(json.dumps({"type": kind, "object": obj}).encode() + b"\n")

    def raw(self, data: bytes) -> None:
        self._send.send_nowait(data)

    def end(self) -> None:
        self._send.close()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while not self.closed:
            try:
                yield await self._receive.receive()
            except trio.EndOfChannel:
                return

    async def aclose(self) -> None:
        self.closed = True


class FakeApi:
    """Answers lists from ``objects``; each watch opens a ``WatchStream`` unless scripted."""

    def __init__(self) -> None:
        self.objects: list[dict[str, Any]] = [pod("a", 5), pod("b", 7)]
        self.version = 10
        self.lists: list[tuple[float, dict[str, str]]] = []
        self.watches: list[tuple[float, dict[str, str]]] = []
        self.list_answers: list[httpx.Response] = []
        self.watch_answers: list[httpx.Response] = []
        self.streams: list[WatchStream] = []
        self.expired_tokens: set[str] = set()
        """Continue tokens answered ``410 Expired`` (compacted since the first page)."""

    async def handler(self, request: httpx.Request) -> httpx.Response:
        params = dict(request.url.params)
        assert request.url.path == PATH
        assert request.headers["Authorization"] == "Bearer secret"
        now = trio.current_time()
        if params.pop("watch", None) == "true":
            self.watches.append((now, params))
            if self.watch_answers:
                return self.watch_answers.pop(0)
            stream = WatchStream(params)
            self.streams.append(stream)
            return httpx.Response(200, stream=stream)
        self.lists.append((now, params))
        if self.list_answers:
            return self.list_answers.pop(0)
        items, metadata = self.objects, {"resourceVersion": str(self.version)}
        if "limit" in params:  # pages as kube-apiserver cuts them: a continue token per page
            token = params.get("continue", "")
            if token in self.expired_tokens:
                return httpx.Response(
                    410,
                    json={
                        "kind": "Status",
                        "status": "Failure",
                        "reason": "Expired",
                        "code": 410,
                        "message": "The provided continue parameter is too old",
                    },
                )
            start, limit = int(token or 0), int(params["limit"])
            items = self.objects[start : start + limit]
            if start + limit < len(self.objects):
                metadata["continue"] = str(start + limit)
                metadata["remainingItemCount"] = len(self.objects) - start - limit  # type: ignore[assignment]
        return httpx.Response(200, json={"kind": "PodList", "metadata": metadata, "items": items})

    @property
    def stream(self) -> WatchStream:
        """The newest watch, which must still be open."""
        assert self.streams, "no watch was opened"
        assert not self.streams[-1].closed
        return self.streams[-1]


async def settle() -> None:
    await trio.testing.wait_all_tasks_blocked()


@pytest.fixture
def fake() -> FakeApi:
    return FakeApi()


@asynccontextmanager
async def running(fake: FakeApi, *, start: bool = True, **options: Any) -> AsyncIterator[Informer]:
    options.setdefault("backoff", NO_JITTER)
    async with (
        KubeClient(CONFIG, transport=httpx.MockTransport(fake.handler)) as client,
        trio.open_nursery() as nursery,
    ):
        informer = Informer(client, PATH, field_selector="spec.nodeName=n1", **options)
        if start:
            await nursery.start(informer.run)
        else:
            nursery.start_soon(informer.run)
        await settle()
        yield informer
        nursery.cancel_scope.cancel()


def synced(informer: Informer) -> bool:
    """Read through a call, so the type checker does not pin the property after one assert."""
    return informer.synced


def names(informer: Informer) -> list[str]:
    return sorted(o["metadata"]["name"] for o in informer.objects())


# -- first sync and events ----------------------------------------------------------------------


async def test_first_list_then_watch_from_its_version(
    fake: FakeApi, mock_clock: trio.testing.MockClock
) -> None:
    async with running(fake, label_selector="app=x", watch_timeout=120) as informer:
        assert informer.synced
        assert (names(informer), informer.version, informer.last_error) == (["a", "b"], "10", None)
        assert fake.lists == [
            (0.0, {"fieldSelector": "spec.nodeName=n1", "labelSelector": "app=x", "limit": "500"})
        ]
        assert fake.watches == [
            (
                0.0,
                {
                    "fieldSelector": "spec.nodeName=n1",
                    "labelSelector": "app=x",
                    "resourceVersion": "10",
                    "allowWatchBookmarks": "true",
                    "timeoutSeconds": "120",
                },
            )
        ]


async def test_events_are_applied(fake: FakeApi, mock_clock: trio.testing.MockClock) -> None:
    async with running(fake) as informer:
        before = informer.objects()
        generation = informer.generation
        fake.stream.event("ADDED", pod("c", 11))
        fake.stream.event("MODIFIED", pod("a", 12, tier="gold"))
        fake.stream.event("DELETED", pod("b", 13))
        await settle()
        assert names(informer) == ["a", "c"]
        assert informer.get("team-a", "a") == pod("a", 12, tier="gold")
        assert informer.get("team-a", "b") is None
        assert informer.version == "13"
        assert informer.generation == generation + 3
        assert [o["metadata"]["name"] for o in before] == ["a", "b"]  # the snapshot held still
        assert before[0] == pod("a", 5)
        assert informer.statistics().events == 3


async def test_delete_of_an_unknown_object_is_harmless(
    fake: FakeApi, mock_clock: trio.testing.MockClock
) -> None:
    async with running(fake) as informer:
        fake.stream.event("DELETED", pod("zz", 11))
        await settle()
        assert names(informer) == ["a", "b"]
        assert (informer.version, informer.last_error) == ("11", None)


async def test_same_name_in_two_namespaces_are_two_objects(
    fake: FakeApi, mock_clock: trio.testing.MockClock
) -> None:
    async with running(fake) as informer:
        fake.stream.event("ADDED", pod("a", 11, namespace="team-b"))
        await settle()
        assert informer.get("team-a", "a") == pod("a", 5)
        assert informer.get("team-b", "a") == pod("a", 11, namespace="team-b")
        fake.stream.event("DELETED", pod("a", 12, namespace="team-a"))
        await settle()
        assert [(o["metadata"]["namespace"]) for o in informer.objects()] == ["team-a", "team-b"]
        assert names(informer) == ["a", "b"]


async def test_wait_changed_wakes_on_a_change(
    fake: FakeApi, mock_clock: trio.testing.MockClock
) -> None:
    async with running(fake) as informer:
        woke: list[list[str]] = []

        async def waiter() -> None:
            await informer.wait_changed()
            woke.append(names(informer))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await settle()
            fake.stream.event("BOOKMARK", {"metadata": {"resourceVersion": "20"}})
            await settle()
            assert woke == []  # a bookmark is no change
            fake.stream.event("ADDED", pod("c", 21))
        assert woke == [["a", "b", "c"]]


async def test_bookmark_only_advances_the_version(
    fake: FakeApi, mock_clock: trio.testing.MockClock
) -> None:
    async with running(fake) as informer:
        generation = informer.generation
        fake.stream.event("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": "42"}})
        await settle()
        assert (informer.version, informer.generation, names(informer)) == (
            "42",
            generation,
            ["a", "b"],
        )
        fake.stream.end()  # the server's timeoutSeconds ran out: watch again from the bookmark
        await settle()
        assert [params["resourceVersion"] for _, params in fake.watches] == ["10", "42"]
        assert len(fake.lists) == 1
        stats = informer.statistics()
        assert (stats.watches, stats.bookmarks, stats.relists) == (2, 1, 0)


async def test_malformed_objects_and_unknown_types_are_skipped(
    fake: FakeApi, mock_clock: trio.testing.MockClock
) -> None:
    async with running(fake) as informer:
        fake.stream.event("ADDED", {"metadata": {"resourceVersion": "11"}})  # no name
        fake.stream.event("SURPRISE", pod("x", 12))
        fake.stream.event("ADDED", pod("c", 13))
        await settle()
        assert names(informer) == ["a", "b", "c"]
        assert informer.version == "13"
        assert len(fake.watches) == 1  # the stream carried on


# -- relisting ----------------------------------------------------------------------------------


async def test_expired_error_event_relists_at_once(
    fake: FakeApi, mock_clock: trio.testing.MockClock
) -> None:
    async with running(fake) as informer:
        fake.stream.event("ADDED", pod("c", 11))
        await settle()
        # The server lost history; meanwhile "b" went away without an event reaching us.
        fake.objects, fake.version = [pod("a", 5), pod("c", 11), pod("d", 30)], 31
        fake.stream.event("ERROR", status(410, "Expired", "too old resource version: 11 (31)"))
        await settle()
        assert [t for t, _ in fake.lists] == [0.0, 0.0]
        assert names(informer) == ["a", "c", "d"]
        assert informer.version == "31"
        assert fake.watches[-1][1]["resourceVersion"] == "31"
        stats = informer.statistics()
        assert (stats.lists, stats.relists, stats.expired, stats.errors) == (2, 1, 1, 0)
        assert fake.streams[0].closed


async def test_expired_right_after_listing_backs_off_before_relisting(
    fake: FakeApi, mock_clock: trio.testing.MockClock
) -> None:
    gone = httpx.Response(410, json=status(410, "Expired", "too old resource version"))
    fake.watch_answers = [gone, gone]
    async with running(fake) as informer:
        assert len(fake.lists) == 1
        mock_clock.jump(0.999)
        await settle()
        assert len(fake.lists) == 1  # no list→410→list spin
        mock_clock.jump(0.001)
        await settle()
        assert len(fake.lists) == 2
        mock_clock.jump(1.999)  # the second time in a row waits longer
        await settle()
        assert len(fake.lists) == 2
        mock_clock.jump(0.001)
        await settle()
        assert len(fake.lists) == 3
        stats = informer.statistics()
        assert (stats.expired, stats.errors, stats.relists) == (2, 2, 2)
        assert informer.last_error is None  # the third watch opened


async def test_resync_relists_every_period(
    fake: FakeApi, mock_clock: trio.testing.MockClock
) -> None:
    async with running(fake, resync=300.0, watch_timeout=1000) as informer:
        generation = informer.generation
        mock_clock.jump(299.5)
        await settle()
        assert len(fake.lists) == 1
        mock_clock.jump(0.5)
        await settle()
        assert [t for t, _ in fake.lists] == [0.0, 300.0]
        assert fake.streams[0].closed  # the old watch was dropped for the new one
        assert informer.generation == generation  # nothing differed: nobody is woken
        fake.objects = [pod("a", 5)]
        fake.version = 50
        mock_clock.jump(300)
        await settle()
        assert [t for t, _ in fake.lists] == [0.0, 300.0, 600.0]
        assert (names(informer), informer.version) == (["a"], "50")
        assert informer.generation == generation + 1
        assert fake.watches[-1][1]["resourceVersion"] == "50"
        stats = informer.statistics()
        assert (stats.resyncs, stats.relists, stats.watches) == (2, 2, 3)


# -- failures -----------------------------------------------------------------------------------


async def test_first_start_waits_for_a_successful_list(
    fake: FakeApi, mock_clock: trio.testing.MockClock
) -> None:
    failure = httpx.Response(500, json=status(500, "InternalError", "etcdserver: timeout"))
    fake.list_answers = [failure, failure]
    started = trio.Event()
    async with KubeClient(CONFIG, transport=httpx.MockTransport(fake.handler)) as client:
        informer = Informer(client, PATH, backoff=NO_JITTER)
        async with trio.open_nursery() as nursery:

            async def start() -> None:
                await nursery.start(informer.run)
                started.set()

            nursery.start_soon(start)
            await settle()
            assert not started.is_set()
            assert not synced(informer)
            assert informer.objects() == []
            assert "etcdserver: timeout" in (informer.last_error or "")
            mock_clock.jump(1)
            await settle()
            assert (len(fake.lists), started.is_set()) == (2, False)
            mock_clock.jump(2)
            await settle()
            assert (len(fake.lists), started.is_set()) == (3, True)
            assert synced(informer)
            assert informer.last_error is None
            nursery.cancel_scope.cancel()


async def test_list_backoff_is_exponential_and_bounded(
    fake: FakeApi, autojump_clock: trio.testing.MockClock
) -> None:
    fake.list_answers = [httpx.Response(503, text="unavailable")] * 7
    async with running(fake, backoff=Backoff(initial=0.5, maximum=4.0, jitter=0.0)) as informer:
        times = [t for t, _ in fake.lists]
        assert [b - a for a, b in itertools.pairwise(times)] == [
            0.5,
            1.0,
            2.0,
            4.0,
            4.0,
            4.0,
            4.0,
        ]
        assert informer.statistics().errors == 7


async def test_watch_errors_back_off_and_rewatch_without_relisting(
    fake: FakeApi, mock_clock: trio.testing.MockClock
) -> None:
    refused = httpx.Response(500, json=status(500, "InternalError", "watch chan error"))
    fake.watch_answers = [refused, refused]
    async with running(fake) as informer:
        assert "watch chan error" in (informer.last_error or "")
        mock_clock.jump(1)
        await settle()
        assert len(fake.watches) == 2
        mock_clock.jump(1.5)
        await settle()
        assert len(fake.watches) == 2  # the second wait is 2 s
        mock_clock.jump(0.5)
        await settle()
        assert [p["resourceVersion"] for _, p in fake.watches] == ["10", "10", "10"]
        fake.stream.event("ADDED", pod("c", 11))
        await settle()
        assert informer.last_error is None
        assert len(fake.lists) == 1
        assert informer.statistics().errors == 2


async def test_error_event_and_broken_stream_rewatch_from_the_last_version(
    fake: FakeApi, mock_clock: trio.testing.MockClock
) -> None:
    async with running(fake) as informer:
        fake.stream.event("ADDED", pod("c", 11))
        fake.stream.event("ERROR", status(500, "InternalError", "boom"))
        await settle()
        assert informer.last_error is not None
        assert "boom" in informer.last_error
        mock_clock.jump(1)
        await settle()
        fake.stream.raw(b"{not json\n")
        await settle()
        assert "not JSON" in (informer.last_error or "")
        mock_clock.jump(1.999)  # a second failure in a row: 2 s
        await settle()
        assert len(fake.watches) == 2
        mock_clock.jump(0.001)
        await settle()
        fake.stream.event("ADDED", pod("d", 12))
        fake.stream.raw(b"[]\n")
        await settle()
        mock_clock.jump(1)  # an event came in between: the backoff started over
        await settle()
        assert [p["resourceVersion"] for _, p in fake.watches] == ["10", "11", "11", "12"]
        assert len(fake.lists) == 1
        assert names(informer) == ["a", "b", "c", "d"]


async def test_a_stream_that_ends_at_once_is_not_rewatched_in_a_loop(
    fake: FakeApi, mock_clock: trio.testing.MockClock
) -> None:
    async with running(fake) as informer:
        fake.stream.end()
        await settle()
        assert len(fake.watches) == 1
        assert "ended at once" in (informer.last_error or "")
        mock_clock.jump(1)
        await settle()
        assert len(fake.watches) == 2
        mock_clock.jump(5)
        fake.stream.end()  # open for 5 s, a normal server timeout: watch again now
        await settle()
        assert len(fake.watches) == 3


# -- backoff ------------------------------------------------------------------------------------


def test_backoff_delays() -> None:
    backoff = Backoff(initial=1.0, maximum=10.0, factor=3.0, jitter=0.0)
    assert [backoff.delay(n) for n in range(1, 6)] == [1.0, 3.0, 9.0, 10.0, 10.0]
    assert backoff.delay(10_000) == 10.0  # no overflow after a long outage


def test_backoff_jitter_only_shortens() -> None:
    backoff = Backoff(initial=2.0, maximum=8.0, jitter=0.25)
    assert backoff.delay(1, rand=lambda: 0.0) == 2.0
    assert backoff.delay(1, rand=lambda: 1.0) == 1.5
    assert backoff.delay(9, rand=lambda: 0.5) == 7.0


# -- handlers -----------------------------------------------------------------------------------


async def test_handlers_are_told_each_changed_key_also_by_a_relist(
    fake: FakeApi, mock_clock: trio.testing.MockClock
) -> None:
    told: list[tuple[str, str]] = []
    async with running(fake, start=False, resync=300.0, watch_timeout=1000) as informer:
        informer.add_handler(told.append)
        await settle()
        assert told == []  # added after the first list: nothing yet
        fake.stream.event("MODIFIED", pod("a", 12, tier="gold"))
        fake.stream.event("DELETED", pod("b", 13))
        await settle()
        assert told == [("team-a", "a"), ("team-a", "b")]
        told.clear()
        # Events lost while disconnected: the relist reports exactly what differs.
        fake.objects = [pod("a", 12, tier="gold"), pod("c", 20)]
        fake.version = 30
        mock_clock.jump(300)
        await settle()
        assert told == [("team-a", "c")]


# -- lists in pages, and relists that keep what did not change ------------------------------------


async def test_a_list_is_read_in_pages_of_the_page_size(
    fake: FakeApi, mock_clock: trio.testing.MockClock
) -> None:
    fake.objects = [pod(f"p{i:04d}", 100 + i) for i in range(1203)]
    async with running(fake, page_size=500) as informer:
        assert len(informer.objects()) == 1203
        assert names(informer) == [f"p{i:04d}" for i in range(1203)]
        pages = [(p.get("limit"), p.get("continue")) for _, p in fake.lists]
        assert pages == [("500", None), ("500", "500"), ("500", "1000")]
        assert fake.watches[0][1]["resourceVersion"] == "10"


async def test_an_expired_continue_token_lists_the_rest_whole_once(
    fake: FakeApi, mock_clock: trio.testing.MockClock
) -> None:
    fake.objects = [pod(f"p{i:04d}", 100 + i) for i in range(12)]
    fake.expired_tokens = {"5"}  # compacted between the first page and the second
    async with running(fake, page_size=5) as informer:
        assert len(informer.objects()) == 12
        assert [(p.get("limit"), p.get("continue")) for _, p in fake.lists] == [
            ("5", None),
            ("5", "5"),
            (None, None),
        ]
        assert informer.statistics().errors == 0  # recovered inside the one list


async def test_page_size_zero_lists_whole(
    fake: FakeApi, mock_clock: trio.testing.MockClock
) -> None:
    fake.objects = [pod(f"p{i}", 100 + i) for i in range(7)]
    async with running(fake, page_size=0) as informer:
        assert len(informer.objects()) == 7
        assert [p.get("limit") for _, p in fake.lists] == [None]


async def test_a_relist_keeps_unchanged_objects_and_decodes_only_the_changed(
    mock_clock: trio.testing.MockClock,
) -> None:
    fake = FakeApi()
    fake.objects = [pod("a", 5), pod("b", 7), pod("c", 9)]
    decoded: list[str] = []

    def decode(obj: dict[str, Any]) -> dict[str, Any]:
        decoded.append(obj["metadata"]["name"])
        return {"name": obj["metadata"]["name"], "version": obj["metadata"]["resourceVersion"]}

    told: list[tuple[str, str]] = []
    async with (
        KubeClient(CONFIG, transport=httpx.MockTransport(fake.handler)) as client,
        trio.open_nursery() as nursery,
    ):
        informer = Informer(
            client, PATH, decode=decode, resync=300.0, watch_timeout=1000, backoff=NO_JITTER
        )
        await nursery.start(informer.run)
        informer.add_handler(told.append)
        before = {o["name"]: o for o in informer.objects()}
        assert sorted(decoded) == ["a", "b", "c"]
        decoded.clear()
        generation = informer.generation
        # b changed (a new resourceVersion) and c is gone while no watch told us; a is as it was
        fake.objects = [pod("a", 5), pod("b", 8)]
        fake.version = 20
        mock_clock.jump(300)
        await settle()
        after = {o["name"]: o for o in informer.objects()}
        assert decoded == ["b"]  # a was not decoded again
        assert after["a"] is before["a"]
        assert after["b"] == {"name": "b", "version": "8"}
        assert sorted(told) == [("team-a", "b"), ("team-a", "c")]
        assert informer.generation == generation + 1
        # an event moves the kept version too: the next relist at that version decodes nothing
        fake.stream.event("MODIFIED", pod("a", 21))
        await settle()
        decoded.clear()
        fake.objects = [pod("a", 21), pod("b", 8)]
        fake.version = 21
        mock_clock.jump(300)
        await settle()
        assert decoded == []
        assert informer.get("team-a", "a") == {"name": "a", "version": "21"}
        nursery.cancel_scope.cancel()
