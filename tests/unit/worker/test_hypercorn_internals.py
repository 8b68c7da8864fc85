"""The hypercorn internals the worker's TLS termination drives, pinned by their signatures.

``gpustack_worker.tls`` hands hypercorn's per-connection ``TCPServer`` a stream of its own
(OpenSSL over memory BIOs), which no public API offers. If a hypercorn release moves or
reshapes any of these, this test names what moved instead of the worker failing at the first
connection.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
import tomllib
from importlib.metadata import version
from pathlib import Path

from hypercorn.app_wrappers import ASGIWrapper
from hypercorn.config import Config
from hypercorn.trio import tcp_server
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState, LifespanState
from packaging.requirements import Requirement
from packaging.version import Version

from gpustack_worker.tls import IdleTimer, TLSStream

REPO = Path(__file__).resolve().parents[3]


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


def _hypercorn_requirement() -> Requirement:
    project = tomllib.loads((REPO / "packages" / "worker" / "pyproject.toml").read_text())
    [found] = [
        Requirement(spec)
        for spec in project["project"]["dependencies"]
        if Requirement(spec).name == "hypercorn"
    ]
    return found


def _locked_version() -> Version:
    lock = (REPO / "uv.lock").read_text()
    match = re.search(r'\[\[package\]\]\nname = "hypercorn"\nversion = "([^"]+)"', lock)
    assert match is not None, "hypercorn is not in uv.lock"
    return Version(match.group(1))


def test_the_worker_pins_an_upper_bound_that_admits_the_locked_and_installed_version() -> None:
    requirement = _hypercorn_requirement()
    uppers = [spec for spec in requirement.specifier if spec.operator in {"<", "<="}]
    assert uppers, f"packages/worker/pyproject.toml: {requirement} needs an upper bound"
    assert requirement.specifier.contains(_locked_version()), (requirement, _locked_version())
    assert requirement.specifier.contains(version("hypercorn")), (requirement, version("hypercorn"))
    # The version test above and the pin say the same thing: raise them together.
    assert str(requirement.specifier) == "<0.19,>=0.17"


def _self_attributes(cls: type, owner: str) -> set[str]:
    """Every ``self.<owner>.<name>`` the class's source reads."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == owner
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id == "self"
    }


GUARDED = {"socket", "send_eof"}
"""Read by TCPServer only under ``except AttributeError`` (its plain-TCP fallbacks): our TLS
stream has neither, and must not — the first picks the TLS branch, the second is skipped."""


def test_tcp_server_drives_the_stream_only_through_what_our_tls_stream_offers() -> None:
    used = _self_attributes(TCPServer, "stream")
    assert used == {
        "aclose",
        "do_handshake",
        "receive_some",
        "selected_alpn_protocol",
        "send_all",
        "send_eof",
        "socket",
        "transport_stream",
    }, f"hypercorn's TCPServer now uses stream attributes {sorted(used)}: check TLSStream"
    missing = {name for name in used - GUARDED if not hasattr(TLSStream, name)}
    missing.discard("transport_stream")  # an instance attribute, set in __init__
    assert missing == set()
    assert not any(hasattr(TLSStream, name) for name in GUARDED)
    assert "transport_stream" in inspect.getsource(TLSStream.__init__)
    source = inspect.getsource(tcp_server)
    assert source.count("except AttributeError") == 1, "the not-SSL fallback moved"
    assert "AttributeError," in source, "send_eof's AttributeError guard moved"


def test_the_settings_and_worker_context_it_reads_still_exist() -> None:
    assert _self_attributes(TCPServer, "config") == {
        "keep_alive_timeout",
        "read_timeout",
        "ssl_handshake_timeout",
    }
    config = Config()
    for name in ("keep_alive_timeout", "read_timeout", "ssl_handshake_timeout", "graceful_timeout"):
        assert hasattr(config, name), name
    context = WorkerContext(None)
    assert inspect.iscoroutinefunction(context.terminated.set)
    assert inspect.iscoroutinefunction(context.terminated.wait)
    for method in ("handle_lifespan", "wait_for_startup", "wait_for_shutdown"):
        assert inspect.iscoroutinefunction(getattr(Lifespan, method)), method


def test_the_idle_timer_it_replaces_is_used_as_the_worker_s_idle_timer_is() -> None:
    """``tls._handle`` swaps ``TCPServer.idle_task`` for an ``IdleTimer``: the two calls on it,
    the close it triggers and the shutdown event it watches must stay where they are."""
    assert _self_attributes(TCPServer, "idle_task") == {"restart", "stop"}
    source = inspect.getsource(TCPServer)
    assert "self.idle_task = TrioSingleTask()" in source
    assert "self.idle_task.restart(self._task_group, self._idle_timeout)" in source
    assert inspect.iscoroutinefunction(TCPServer._initiate_server_close)
    idle = inspect.getsource(TCPServer._idle_timeout)
    assert "self.config.keep_alive_timeout" in idle
    assert "self.context.terminated.wait()" in idle
    assert "self._initiate_server_close()" in idle
    assert callable(WorkerContext(None).terminated.is_set)
    for method in ("restart", "stop"):
        assert inspect.iscoroutinefunction(getattr(IdleTimer, method)), method
