"""The hypercorn internals the worker's TLS termination drives, pinned by their signatures.

``gpustack_worker.tls`` hands hypercorn's per-connection ``TCPServer`` a stream of its own
(OpenSSL over memory BIOs), which no public API offers. If a hypercorn release moves or
reshapes any of these, this test names what moved instead of the worker failing at the first
connection.
"""

from __future__ import annotations

import inspect
from importlib.metadata import version

from hypercorn.app_wrappers import ASGIWrapper
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState, LifespanState


def _parameters(callable_: object) -> list[str]:
    return [p for p in inspect.signature(callable_).parameters if p != "self"]  # type: ignore[arg-type]


def test_the_constructors_the_worker_calls_keep_their_shape() -> None:
    assert _parameters(TCPServer.__init__) == ["app", "config", "context", "state", "stream"]
    assert _parameters(WorkerContext.__init__)[:1] == ["max_requests"]
    assert _parameters(Lifespan.__init__)[:3] == ["app", "config", "state"]
    assert _parameters(ASGIWrapper.__init__) == ["app"]
    assert callable(ConnectionState)
    assert LifespanState is not None


def test_tcp_server_is_driven_by_run() -> None:
    assert inspect.iscoroutinefunction(TCPServer.run)


def test_the_version_is_one_the_worker_was_built_against() -> None:
    major, minor = (int(part) for part in version("hypercorn").split(".")[:2])
    assert (major, minor) in {(0, 17), (0, 18)}, version("hypercorn")
