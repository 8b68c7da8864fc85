"""Waiting on a Kubernetes API in tests: woken by a watch, not by a clock (issue #32, item 4).

Integration tests used to poll every 0.1 s, each file with its own copy of ``eventually``. A
poll that is fast enough on a quiet machine is a busy loop on a loaded one (every probe a
request through the stand-in's event loop, competing with the system under test), and its
period is a timing the test does not mean. Two waits, in one place:

- :func:`until_object` is client-go's ``UntilWithSync`` for one object: read it, and if it does
  not satisfy the check yet, watch it from that ``resourceVersion`` and check each event. It
  wakes exactly when the object changes; the only deadline is :data:`patience.HANG`.
- :func:`until_gone` is the same for a deletion (an object may be gone before the watch opens;
  the watch starts from the list's version, so a deletion between is not missed).
- :func:`eventually` remains for conditions no single object's watch can report (a log line, a
  count over several objects, a subresource answer); it polls an async probe, treats
  ``NotFound`` as "not yet", and fails with the last value it saw.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from typing import Any, TypeVar

import pytest
import trio

from gpustack_kube.client import ApiError, KubeClient, NotFound
from patience import HANG

T = TypeVar("T")

WATCH_SECONDS = 30
"""Each watch asks the server to end it after this long; the wait then reads and watches anew."""


def _split(path: str) -> tuple[str, str]:
    collection, _, name = path.rstrip("/").rpartition("/")
    if not collection or not name:
        raise ValueError(f"not an object path: {path!r}")
    return collection, name


def _watch_from(
    client: KubeClient, collection: str, name: str, version: str
) -> AsyncGenerator[dict[str, Any], None]:
    return client.watch(
        collection,
        {
            "fieldSelector": f"metadata.name={name}",
            "resourceVersion": version,
            "timeoutSeconds": WATCH_SECONDS,
        },
    )


async def until_object(
    client: KubeClient, path: str, check: Callable[[dict[str, Any]], T | None], what: str
) -> T:
    """``check(object)`` for the object at ``path`` once it is truthy, woken by a watch on it.

    ``path`` is the object's own (``…/namespaces/<ns>/<resource>/<name>``, or cluster-scoped).
    An object that does not exist yet is waited for too. A ``410 Expired`` watch (the version
    compacted away) reads the object again, as a reflector relists.
    """
    collection, name = _split(path)
    last: dict[str, Any] | None = None
    with trio.move_on_after(HANG):
        while True:
            try:
                last = await client.get(path)
            except NotFound:
                listed = await client.get(collection, {"fieldSelector": f"metadata.name={name}"})
                version = str(listed["metadata"]["resourceVersion"])
            else:
                found = check(last)
                if found:
                    return found
                version = str(last["metadata"]["resourceVersion"])
            try:
                async with aclosing(_watch_from(client, collection, name, version)) as events:
                    async for event in events:
                        if event["type"] in ("ADDED", "MODIFIED"):
                            last = event["object"]
                            found = check(last)
                            if found:
                                return found
            except ApiError as error:
                if error.status != 410:
                    raise
    pytest.fail(f"not within {HANG:.0f}s (a hang): {what}; last: {last!r}")


async def until_gone(client: KubeClient, path: str, what: str) -> None:
    """Return once the object at ``path`` no longer exists, woken by its DELETED event."""
    collection, name = _split(path)
    with trio.move_on_after(HANG):
        while True:
            listed = await client.get(collection, {"fieldSelector": f"metadata.name={name}"})
            if not listed.get("items"):
                return
            version = str(listed["metadata"]["resourceVersion"])
            try:
                async with aclosing(_watch_from(client, collection, name, version)) as events:
                    async for event in events:
                        if event["type"] == "DELETED":
                            return
            except ApiError as error:
                if error.status != 410:
                    raise
    pytest.fail(f"not within {HANG:.0f}s (a hang): {what} still exists")


async def eventually(
    probe: Callable[[], Awaitable[T | None]], what: str, *, poll: float = 0.1
) -> T:
    """``await probe()`` once it is truthy (``NotFound`` counts as not yet); fails naming ``what``.

    For a condition on one object, prefer :func:`until_object`.
    """
    last: object = None
    with trio.move_on_after(HANG):
        while True:
            try:
                found = await probe()
            except NotFound:
                found = None
            if found:
                return found
            last = found
            await trio.sleep(poll)
    pytest.fail(f"not within {HANG:.0f}s (a hang): {what}; last: {last!r}")
