"""The typed informer: each object decoded once when it arrives, indexes kept with the view.

Runs against the scripted API server of ``test_informer``; the decoder counts its calls, so
"once per event" is what the counter saw, not what the informer reports.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import trio
import trio.testing
from test_informer import CONFIG, NO_JITTER, PATH, FakeApi, pod, settle

from gpustack_kube.client import KubeClient
from gpustack_kube.informer import Informer, label_index


@dataclass(frozen=True)
class Small:
    name: str
    node: str
    tier: str | None


class Decoder:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, obj: dict[str, Any]) -> Small:
        meta = obj["metadata"]
        self.calls.append(f"{meta['name']}@{meta['resourceVersion']}")
        if meta["labels"].get("broken"):
            raise ValueError("not a usable object")
        return Small(meta["name"], obj["spec"]["nodeName"], meta["labels"].get("tier"))


def by_node(obj: Small) -> Iterable[str]:
    return (obj.node,)


def by_tier(obj: Small) -> Iterable[str]:
    return (obj.tier,) if obj.tier else ()


def placed(name: str, version: int, node: str, **labels: str) -> dict[str, Any]:
    obj = pod(name, version, **labels)
    obj["spec"]["nodeName"] = node
    return obj


@asynccontextmanager
async def typed(fake: FakeApi, decoder: Decoder) -> AsyncIterator[Informer[Small]]:
    async with (
        KubeClient(CONFIG, transport=httpx.MockTransport(fake.handler)) as client,
        trio.open_nursery() as nursery,
    ):
        informer = Informer(
            client,
            PATH,
            decode=decoder,
            indexers={"node": by_node, "tier": by_tier},
            backoff=NO_JITTER,
        )
        await nursery.start(informer.run)
        await settle()
        yield informer
        nursery.cancel_scope.cancel()


async def test_each_object_is_decoded_once_per_event(
    mock_clock: trio.testing.MockClock,
) -> None:
    fake, decoder = FakeApi(), Decoder()
    async with typed(fake, decoder) as informer:
        assert decoder.calls == ["a@5", "b@7"]  # the list
        for _ in range(3):
            assert sorted(o.name for o in informer.objects()) == ["a", "b"]
            assert informer.get("team-a", "a") == Small("a", "n1", None)
        assert decoder.calls == ["a@5", "b@7"]  # reading decodes nothing
        generation = informer.generation
        fake.stream.event("MODIFIED", placed("a", 11, "n1", tier="gold"))
        fake.stream.event("BOOKMARK", {"metadata": {"resourceVersion": "12"}})
        await settle()
        assert decoder.calls == ["a@5", "b@7", "a@11"]  # one event, one decode
        assert informer.generation == generation + 1  # the bookmark changed nothing
        assert informer.statistics().decodes == 3


async def test_indexes_follow_adds_moves_and_deletes(
    mock_clock: trio.testing.MockClock,
) -> None:
    fake, decoder = FakeApi(), Decoder()
    fake.objects = [placed("a", 5, "n1", tier="gold"), placed("b", 7, "n2")]
    async with typed(fake, decoder) as informer:
        assert [o.name for o in informer.by_index("node", "n1")] == ["a"]
        assert [o.name for o in informer.by_index("tier", "gold")] == ["a"]
        assert informer.index_values("node") == ["n1", "n2"]

        fake.stream.event("ADDED", placed("c", 11, "n2", tier="gold"))
        fake.stream.event("MODIFIED", placed("a", 12, "n2", tier="silver"))
        await settle()
        assert [o.name for o in informer.by_index("node", "n2")] == ["a", "b", "c"]
        assert informer.by_index("node", "n1") == []
        assert informer.index_values("node") == ["n2"]  # an emptied value is dropped
        assert [o.name for o in informer.by_index("tier", "gold")] == ["c"]
        assert [o.name for o in informer.by_index("tier", "silver")] == ["a"]

        fake.stream.event("DELETED", placed("c", 13, "n2", tier="gold"))
        await settle()
        assert informer.index_values("tier") == ["silver"]
        assert [o.name for o in informer.by_index("node", "n2")] == ["a", "b"]


async def test_an_object_the_decoder_refuses_is_left_out(
    mock_clock: trio.testing.MockClock,
) -> None:
    fake, decoder = FakeApi(), Decoder()
    fake.objects = [placed("a", 5, "n1"), placed("bad", 6, "n1", broken="yes")]
    async with typed(fake, decoder) as informer:
        assert [o.name for o in informer.objects()] == ["a"]
        fake.stream.event("MODIFIED", placed("a", 11, "n1", broken="yes"))
        await settle()
        assert informer.objects() == []  # now undecodable: out of the view and its indexes
        assert informer.by_index("node", "n1") == []
        fake.stream.event("MODIFIED", placed("bad", 12, "n1"))
        await settle()
        assert [o.name for o in informer.objects()] == ["bad"]
        stats = informer.statistics()
        assert (stats.decodes, stats.decode_errors) == (4, 2)
        assert informer.last_error is None  # a refused object is not a failed watch


async def test_raw_informer_indexes_by_label(mock_clock: trio.testing.MockClock) -> None:
    fake = FakeApi()
    fake.objects = [pod("a", 5, tier="gold"), pod("b", 7)]
    async with (
        KubeClient(CONFIG, transport=httpx.MockTransport(fake.handler)) as client,
        trio.open_nursery() as nursery,
    ):
        informer = Informer(client, PATH, indexers={"tier": label_index("tier")})
        await nursery.start(informer.run)
        assert [o["metadata"]["name"] for o in informer.by_index("tier", "gold")] == ["a"]
        assert informer.statistics().decodes == 0
        nursery.cancel_scope.cancel()
