"""An async client for the few Kubernetes API calls the daemons make.

The official ``kubernetes`` client is synchronous; under trio it would need a thread per
watch. This speaks the API directly with httpx, whose transport is also the test seam.
"""

from __future__ import annotations

import contextlib
import json
import logging
import ssl
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import httpx
import trio

from gpustack_kube.auth import ExecAuthenticator, ExecCredential, ExecPluginError
from gpustack_kube.backoff import Backoff
from gpustack_kube.config import KUBECONFIG_LIMIT, KubeConfig
from gpustack_kube.files import read_text_capped

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 30.0
"""Seconds for connecting and for each read of a non-watch request."""
ERROR_BODY_LIMIT = 64 * 1024
"""Error bodies are read this far: enough for any Status, bounded against a misbehaving proxy."""
TOKEN_REREAD_SECONDS = 60.0
"""How long a token read from a file is reused; client-go rereads on the same period."""

Params = Mapping[str, str | int | bool]

T = TypeVar("T")

DEFAULT_RETRY = Backoff(initial=0.01, maximum=0.01, factor=1.0, jitter=0.1)
"""client-go's ``retry.DefaultRetry``: five tries about 10 ms apart. A conflict means another
writer just won; its write is already visible, so a re-read and retry soon succeeds."""


POOL_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=100, keepalive_expiry=30)
"""Connections to the API server: at most 100 open, all of them kept while idle for 30 s."""


class PatchType(StrEnum):
    """The three patch formats, by the Content-Type that selects each."""

    MERGE = "application/merge-patch+json"
    """RFC 7386: objects merge, lists are replaced whole, ``null`` deletes a key."""
    STRATEGIC = "application/strategic-merge-patch+json"
    """Built-in kinds only: lists with a patch key (containers by name) merge item by item."""
    JSON = "application/json-patch+json"
    """RFC 6902: a list of operations; ``test`` makes a patch conditional."""


class OneShotBody(httpx.AsyncByteStream):
    """A request body sent in one chunk, iterated without an async generator.

    httpx wraps ``content=`` bytes in a stream whose iterator is an async generator; a request
    cancelled mid-send (a deadline, a shutdown, a leader losing its lease) leaves that generator
    unexhausted, and trio warns when it is garbage-collected, at some later, unrelated point.
    A plain iterator object has nothing to finalize, so cancelling a request costs nothing.
    """

    def __init__(self, data: bytes) -> None:
        self._data = data

    def __aiter__(self) -> AsyncIterator[bytes]:
        return _Once(self._data)


class _Once:
    """Yields its bytes once (none when empty), then stops."""

    def __init__(self, data: bytes) -> None:
        self._data: bytes | None = data

    def __aiter__(self) -> _Once:
        return self

    async def __anext__(self) -> bytes:
        data, self._data = self._data, None
        if not data:
            raise StopAsyncIteration
        return data


class KubeError(Exception):
    """Anything that kept a request from producing its answer; one type for callers to catch."""


class ApiError(KubeError):
    """A non-2xx answer (or a watch ERROR event), with what its ``Status`` body said."""

    def __init__(self, status: int, reason: str, message: str, body: bytes = b"") -> None:
        super().__init__(f"{status} {reason}: {message}" if message else f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body

    @property
    def expired(self) -> bool:
        """The resourceVersion asked for is gone from the server's history: relist."""
        return self.status == 410 or self.reason in {"Expired", "Gone"}

    @classmethod
    def from_response(cls, status: int, phrase: str, body: bytes) -> ApiError:
        """Read the ``Status`` body when there is one; proxies and kubelets may send text.

        The answer is the subclass for its code (``NotFound`` for 404, …), whichever class
        this is called on, so ``except NotFound`` works the way ``errors.IsNotFound`` does.
        """
        try:
            decoded = json.loads(body)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict) and decoded.get("kind") == "Status":
            return cls.from_status(decoded, body, default_code=status, default_reason=phrase)
        text = body.decode("utf-8", "replace").strip()
        return _error_class(status, phrase)(status, phrase, text[:500], body)

    @classmethod
    def from_status(
        cls,
        status: Mapping[str, Any],
        body: bytes = b"",
        *,
        default_code: int = 500,
        default_reason: str = "",
    ) -> ApiError:
        """The typed error for a decoded ``Status`` (error body or watch ERROR event)."""
        code = status.get("code")
        reason = status.get("reason")
        message = status.get("message")
        status_code = code if isinstance(code, int) else default_code
        status_reason = reason if isinstance(reason, str) and reason else default_reason
        kind = _error_class(status_code, status_reason)
        return kind(status_code, status_reason, message if isinstance(message, str) else "", body)


class BadRequest(ApiError):  # noqa: N818 — the Status reason's name, as apimachinery's errors
    """400: the request itself is wrong (a malformed patch, a bad selector)."""


class Unauthorized(ApiError):  # noqa: N818 — the Status reason's name, as apimachinery's errors
    """401: the credential was not accepted (expired, revoked, or none was sent)."""


class Forbidden(ApiError):  # noqa: N818 — the Status reason's name, as apimachinery's errors
    """403: authenticated, but RBAC (or an admission plugin) refuses the verb."""


class NotFound(ApiError):  # noqa: N818 — the Status reason's name, as apimachinery's errors
    """404: no such object, namespace or resource type."""


class Conflict(ApiError):  # noqa: N818 — the Status reason's name, as apimachinery's errors
    """409: a write based on a stale ``resourceVersion`` or a failed precondition.

    Re-read and try again (:func:`retry_on_conflict`); ``AlreadyExists`` is the one 409
    that retrying cannot fix.
    """


class AlreadyExists(Conflict):
    """409 with reason ``AlreadyExists``: a create found the name taken."""


class Gone(ApiError):  # noqa: N818 — the Status reason's name, as apimachinery's errors
    """410: the resourceVersion asked for is no longer in the server's history."""


class Invalid(ApiError):  # noqa: N818 — the Status reason's name, as apimachinery's errors
    """422: the object fails validation; the message names the fields."""


class TooManyRequests(ApiError):  # noqa: N818 — the Status reason's name, as apimachinery's errors
    """429: the server's priority-and-fairness queue is full; back off and retry."""


class ServerError(ApiError):
    """5xx: the API server (or something in front of it) failed; the request may be retried."""


_BY_CODE: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}


def _error_class(code: int, reason: str) -> type[ApiError]:
    """The subclass for a code; the reason only tells ``AlreadyExists`` from other 409s."""
    if code == 409 and reason == "AlreadyExists":
        return AlreadyExists
    if 500 <= code <= 599:
        return ServerError
    return _BY_CODE.get(code, ApiError)


async def retry_on_conflict(
    fn: Callable[[], Awaitable[T]],
    *,
    attempts: int = 5,
    backoff: Backoff = DEFAULT_RETRY,
) -> T:
    """Run ``fn`` until it does not raise ``Conflict``, as client-go's ``RetryOnConflict``.

    ``fn`` must re-read what it writes each time: retrying the same stale body would conflict
    again. Only a ``Conflict`` is retried — an ``AlreadyExists`` will not go away, and any
    other error is the caller's to judge. After ``attempts`` tries the last ``Conflict`` is
    raised.
    """
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    for attempt in range(1, attempts + 1):
        try:
            return await fn()
        except AlreadyExists:
            raise
        except Conflict:
            if attempt == attempts:
                raise
            await trio.sleep(backoff.delay(attempt))
    raise AssertionError("unreachable")  # pragma: no cover — the loop returns or raises


class TooLarge(KubeError):  # noqa: N818 — the name the callers were promised
    """A bounded read found more than its limit; the rest was not read."""

    def __init__(self, path: str, limit: int) -> None:
        super().__init__(f"{path}: response exceeds {limit} bytes")
        self.path = path
        self.limit = limit


class TransportError(KubeError):
    """The API server could not be reached or the connection broke (timeouts included)."""


class AuthenticationError(KubeError):
    """The kubeconfig's credential plugin failed; the message says how (and how to install it)."""


class MalformedResponseError(KubeError):
    """A 2xx answer whose body is not what the API promises (not JSON, not an object)."""


def _decode_object(raw: bytes | str, what: str) -> dict[str, Any]:
    try:
        decoded = json.loads(raw)
    except ValueError as exc:
        raise MalformedResponseError(f"{what}: not JSON: {exc}") from exc
    if not isinstance(decoded, dict):
        raise MalformedResponseError(
            f"{what}: expected a JSON object, got {type(decoded).__name__}"
        )
    return decoded


class KubeClient:
    """One connection pool to one API server, with the config's identity."""

    def __init__(
        self,
        config: KubeConfig,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        """``clock`` is the wall clock an exec credential's expiry is read against."""
        self.config = config
        self.timeout = timeout
        self._token = config.token
        self._token_read_at = -float("inf")
        self._transport = transport
        self.exec_auth: ExecAuthenticator | None = (
            ExecAuthenticator(
                config.exec,
                server=config.server,
                ca_data=config.ca_data,
                insecure=config.insecure,
                clock=clock,
            )
            if config.exec is not None
            else None
        )
        """The kubeconfig's exec plugin, when it has one; tests read its ``runs``."""
        self._client_cert = config.client_cert
        self._retired: list[httpx.AsyncClient] = []
        self._http = self._pool()

    def _pool(self) -> httpx.AsyncClient:
        """A connection pool presenting ``_client_cert``.

        With a transport given (tests), TLS is the transport's business; building the context
        anyway would make every test carry real certificates.
        """
        verify: ssl.SSLContext | bool = (
            True if self._transport is not None else self.config.ssl_context(self._client_cert)
        )
        return httpx.AsyncClient(
            base_url=self.config.server,
            transport=self._transport,
            verify=verify,
            http1=True,
            http2=False,
            # The daemons talk to the API server directly; an HTTPS_PROXY meant for image
            # pulls or a workstation's browser must not reroute (or break) that.
            trust_env=False,
            timeout=httpx.Timeout(self.timeout),
            # As many idle connections kept as may be open: with httpx's default (20 kept of
            # 100) a burst of concurrent requests — the worker's SubjectAccessReviews under 32
            # clients — closed each connection past the twentieth once answered and opened it
            # again for the next burst, a TLS handshake per request (a fifth of the worker's
            # CPU at 1,000 nodes). HTTP/1.1 carries one request per connection at a time.
            limits=POOL_LIMITS,
            headers={"Accept": "application/json", "User-Agent": "gpustack-kube/0.1"},
        )

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the pool; the client cannot be used afterwards."""
        for pool in (*self._retired, self._http):
            await pool.aclose()
        self._retired.clear()

    async def _credential(self) -> ExecCredential | None:
        """The exec plugin's current credential, switching pools when its certificate changed.

        A TLS client certificate is fixed per connection, so a rotated one needs a new pool.
        The previous pool is kept open (a watch may still be streaming on it) until the next
        rotation, by when any such stream has long been re-opened on the newer pool.
        """
        if self.exec_auth is None:
            return None
        try:
            credential = await self.exec_auth.credential()
        except ExecPluginError as exc:
            raise AuthenticationError(str(exc)) from exc
        if credential.client_cert is not None and credential.client_cert != self._client_cert:
            self._client_cert = credential.client_cert
            for pool in self._retired:
                await pool.aclose()
            self._retired = [self._http]
            self._http = self._pool()
        return credential

    def _headers(self, credential: ExecCredential | None) -> dict[str, str]:
        token = (
            credential.token
            if credential is not None and credential.token
            else self._current_token()
        )
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _current_token(self) -> str | None:
        path: Path | None = self.config.token_file
        if path is None:
            return self._token
        now = trio.current_time()
        if now - self._token_read_at >= TOKEN_REREAD_SECONDS:
            try:
                text = read_text_capped(path, KUBECONFIG_LIMIT, "token file")
                self._token = text.strip() or self._token
            except (OSError, ValueError) as exc:
                # Keep the last token: it may still be valid, and a 401 will say so if not.
                log.warning("cannot reread token file %s: %s", path, exc)
            self._token_read_at = now
        return self._token

    async def _send(
        self,
        method: str,
        path: str,
        *,
        params: Params | None = None,
        content: bytes | None = None,
        content_type: str = "application/json",
        timeout: httpx.Timeout | None = None,
        http: httpx.AsyncClient | None = None,
    ) -> httpx.Response:
        """Send and return the response with its body unread (the caller must close it).

        A 401 to an exec plugin's credential re-runs the plugin and sends once more, as
        client-go does: the credential may have been revoked before its stated expiry.
        ``http`` sends to another server (a kubelet) with this identity; by default the API
        server's pool (read per attempt: a rotated plugin certificate replaces it).
        """
        for attempt in (1, 2):
            credential = await self._credential()
            headers = self._headers(credential)
            if content is not None:
                headers["Content-Type"] = content_type
            pool = http if http is not None else self._http
            request = pool.build_request(
                method,
                path,
                params=_query(params),
                content=content,
                headers=headers,
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
            request.stream = OneShotBody(content or b"")
            try:
                response = await pool.send(request, stream=True)
            except httpx.TransportError as exc:
                raise TransportError(f"{method} {path}: {exc!r}") from exc
            if response.status_code != 401 or credential is None or attempt == 2:
                return response
            await response.aclose()
            assert self.exec_auth is not None  # a credential came from it
            self.exec_auth.invalidate(credential)
        raise AssertionError("unreachable")  # pragma: no cover — the loop returns

    async def _read(self, response: httpx.Response, path: str, limit: int | None) -> bytes:
        """Read the body, at most ``limit`` bytes; raise ``ApiError`` for a non-2xx answer."""
        ok = response.is_success
        cap = limit if ok else ERROR_BODY_LIMIT
        chunks: list[bytes] = []
        size = 0
        stream = response.aiter_bytes()
        over = False
        try:
            if ok and cap is not None:
                length = response.headers.get("Content-Length", "")
                if length.isdigit() and int(length) > cap:
                    raise TooLarge(path, cap)
            async for chunk in stream:
                chunks.append(chunk)
                size += len(chunk)
                if cap is not None and size > cap:
                    over = True
                    break
        except httpx.TransportError as exc:
            raise TransportError(f"{response.request.method} {path}: {exc!r}") from exc
        finally:
            if over:
                await abandon_body(response, stream)
            await response.aclose()
        if over and ok:
            raise TooLarge(path, size if cap is None else cap)
        body = b"".join(chunks)
        if not ok:
            raise ApiError.from_response(
                response.status_code, response.reason_phrase, body[:ERROR_BODY_LIMIT]
            )
        return body

    async def get(self, path: str, params: Params | None = None) -> dict[str, Any]:
        """GET a JSON object."""
        response = await self._send("GET", path, params=params)
        return _decode_object(await self._read(response, path, None), f"GET {path}")

    async def get_bytes(self, path: str, params: Params | None = None, *, limit: int) -> bytes:
        """GET a body of at most ``limit`` bytes; beyond it, ``TooLarge`` without reading on.

        For answers whose size the API server does not bound (a kubelet's summary through the
        node proxy on a node with many Pods), so one node cannot make the daemon hold an
        arbitrary amount of memory.
        """
        response = await self._send("GET", path, params=params)
        return await self._read(response, path, limit)

    async def get_bytes_at(self, http: httpx.AsyncClient, url: str, *, limit: int) -> bytes:
        """GET ``url`` on another server with this client's identity, bounded as ``get_bytes``.

        For a kubelet read directly (``nodes/stats``): the kubelet authorizes the same token
        or exec credential the API server accepts; ``http`` carries the kubelet's own TLS.
        """
        response = await self._send("GET", url, http=http)
        return await self._read(response, url, limit)

    async def _write(
        self,
        method: str,
        path: str,
        body: object,
        *,
        params: Params | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        content = json.dumps(body, separators=(",", ":")).encode()
        response = await self._send(
            method, path, params=params, content=content, content_type=content_type
        )
        return _decode_object(await self._read(response, path, None), f"{method} {path}")

    async def create(
        self, path: str, body: Mapping[str, Any], *, params: Params | None = None
    ) -> dict[str, Any]:
        """POST ``body`` to a collection path and return the object as the server stored it.

        The answer carries what the server filled in (``uid``, ``resourceVersion``, defaults);
        a taken name is ``AlreadyExists``. ``params`` take ``dryRun``, ``fieldManager``, ….
        """
        return await self._write("POST", path, body, params=params)

    async def post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST a JSON object (reviews) and return the JSON answer: :meth:`create` by its verb."""
        return await self.create(path, body)

    async def update(
        self, path: str, body: Mapping[str, Any], *, params: Params | None = None
    ) -> dict[str, Any]:
        """PUT the whole object to its path (or its ``/status`` path).

        With ``metadata.resourceVersion`` in ``body`` the server applies it only over that
        version and answers ``Conflict`` otherwise — optimistic concurrency, the reason to
        prefer this over a patch when the write depends on what was read.
        """
        return await self._write("PUT", path, body, params=params)

    async def patch(
        self,
        path: str,
        body: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        patch_type: PatchType = PatchType.MERGE,
        *,
        params: Params | None = None,
    ) -> dict[str, Any]:
        """PATCH an object (or its ``/status``) and return the result.

        A JSON patch is a list of operations; merge and strategic patches are objects. The
        shape is checked here, because the server's answer to a mismatch ("cannot unmarshal
        array into Go value") does not say which call sent it.
        """
        patch_type = PatchType(patch_type)
        if patch_type is PatchType.JSON:
            if isinstance(body, Mapping | str | bytes):
                raise TypeError("a JSON patch is a list of operations")
            payload: object = [dict(op) for op in body]
        else:
            if not isinstance(body, Mapping):
                raise TypeError(f"a {patch_type.name.lower()} patch is an object")
            payload = body
        return await self._write(
            "PATCH", path, payload, params=params, content_type=patch_type.value
        )

    async def delete(
        self,
        path: str,
        *,
        propagation_policy: str | None = None,
        preconditions: Mapping[str, str] | None = None,
        grace_period_seconds: int | None = None,
        params: Params | None = None,
    ) -> dict[str, Any]:
        """DELETE an object, with its options as a ``DeleteOptions`` body (as client-go sends).

        ``propagation_policy`` is ``Orphan``, ``Background`` or ``Foreground``;
        ``preconditions`` (``uid``, ``resourceVersion``) make the delete a ``Conflict`` when
        the object is no longer the one that was read. The answer is the object (still
        present, with ``deletionTimestamp``, while finalizers hold it) or a success ``Status``.
        """
        options: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation_policy is not None:
            options["propagationPolicy"] = propagation_policy
        if preconditions is not None:
            options["preconditions"] = dict(preconditions)
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        return await self._write("DELETE", path, options, params=params)

    async def watch(
        self, path: str, params: Params | None = None
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Stream watch events (``{"type", "object"}``) until the server ends the stream.

        An ERROR event becomes ``ApiError`` (410 Expired among them). Use it inside
        ``contextlib.aclosing`` so that leaving early closes the connection at once instead of
        whenever the generator is collected. With ``timeoutSeconds`` in ``params`` the read
        timeout is that plus the client's, so a stream the server forgot to end (or a silently
        dead connection) still fails; without it a watch may idle indefinitely.
        """
        query: dict[str, str | int | bool] = dict(params or {})
        query["watch"] = "true"
        server_timeout = query.get("timeoutSeconds")
        read: float | None = None
        if server_timeout is not None and not isinstance(server_timeout, bool):
            read = float(server_timeout) + self.timeout
        timeout = httpx.Timeout(self.timeout, read=read)
        response = await self._send("GET", path, params=query, timeout=timeout)
        if not response.is_success:
            await self._read(response, path, None)  # raises ApiError
        lines = response.aiter_lines()
        finished = False
        try:
            async for line in lines:
                if not line.strip():
                    continue
                event = _decode_object(line, f"watch {path}")
                kind = event.get("type")
                obj = event.get("object")
                if not isinstance(kind, str) or not isinstance(obj, dict):
                    raise MalformedResponseError(
                        f"watch {path}: event without type or object: {line[:200]}"
                    )
                if kind == "ERROR":
                    raise ApiError.from_status(obj, line.encode())
                yield event
            finished = True
        except httpx.TransportError as exc:
            raise TransportError(f"watch {path}: {exc!r}") from exc
        finally:
            if not finished:
                await abandon_body(response, lines)
            await response.aclose()


async def abandon_body(response: httpx.Response, body: AsyncIterator[Any]) -> None:
    """Stop reading a body early without leaving httpx's iterators half-run.

    httpx's body iterators are nested async generators (encode/httpx#3686), and closing the
    outermost does not close the ones inside; trio then warns about each one at garbage
    collection. Closing the response first makes the innermost read end at once, so running
    the chain out reads nothing more and lets every level finish. Errors in doing so are the
    expected end of a closed stream; cancellation still propagates.
    """
    await response.aclose()
    with contextlib.suppress(Exception):
        async for _ in body:
            pass


def _query(params: Params | None) -> dict[str, str] | None:
    """Booleans as the API server spells them (``true``), not as Python prints them."""
    if params is None:
        return None
    return {
        k: (("true" if v else "false") if isinstance(v, bool) else str(v))
        for k, v in params.items()
    }
