"""The kube-aggregator in front of the worker's ``worker.gpustack.ai/v1`` and ``gpustack.ai/v1``.

As the real one proxies each APIService to the worker's Service: front-proxy client certificate
and ``X-Remote-*`` identity headers.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator

import httpx
from quart import Response, request

from gpustack_core.status import StatusError
from gpustack_simulator.cluster.routes.base import Caller, RouteBase


class AggregatorRoutes(RouteBase):
    """Forwards to the worker as the APIService would, with ``X-Remote-*`` identity."""

    async def aggregate(self, caller: Caller, rest: str = "") -> Response:
        """Forward to the worker with the caller's identity; 503 while no worker is set."""
        url = self.state.worker_url
        if url is None:
            raise StatusError(503, "the server is currently unable to handle the request")
        # The path as the client sent it, still escaped: forwarding the decoded one would turn
        # an escaped ``#`` or ``?`` in a name into a fragment or a query on the worker's side.
        raw_path = request.scope.get("raw_path") or request.path.encode()
        target = url.rstrip("/") + raw_path.decode("ascii", "replace")
        if request.query_string:
            target += "?" + request.query_string.decode()
        headers = [("X-Remote-User", caller.name)]
        headers += [("X-Remote-Group", group) for group in caller.groups]
        for name in ("Accept", "Content-Type", "User-Agent"):
            if name in request.headers:
                headers.append((name, request.headers[name]))
        if request.args.get("watch", "").lower() in {"1", "true"}:
            return await self._stream(target, headers)
        try:
            async with httpx.AsyncClient(
                verify=self._worker_tls(), timeout=15, trust_env=False
            ) as client:
                answer = await client.request(
                    request.method, target, headers=headers, content=await request.get_data()
                )
        except httpx.HTTPError as exc:
            raise StatusError(503, f"error trying to reach service: {exc}") from exc
        keep = {
            k: v
            for k, v in answer.headers.items()
            if k.lower() in {"content-type", "cache-control", "audit-id"}
        }
        return Response(answer.content, status=answer.status_code, headers=keep)

    async def _stream(self, target: str, headers: list[tuple[str, str]]) -> Response:
        """A watch, relayed chunk by chunk as the aggregator's proxy does (no read timeout)."""
        client = httpx.AsyncClient(
            verify=self._worker_tls(), timeout=httpx.Timeout(15, read=None), trust_env=False
        )
        try:
            answer = await client.send(client.build_request("GET", target, headers=headers),
                                       stream=True)  # fmt: skip
        except httpx.HTTPError as exc:
            await client.aclose()
            raise StatusError(503, f"error trying to reach service: {exc}") from exc

        async def relay() -> AsyncIterator[bytes]:
            try:
                async for chunk in answer.aiter_raw():
                    yield chunk
            except httpx.HTTPError:
                return
            finally:
                await answer.aclose()
                await client.aclose()

        response = Response(
            relay(),
            status=answer.status_code,
            content_type=answer.headers.get("content-type", "application/json"),
        )
        response.timeout = None
        return response

    def _worker_tls(self) -> ssl.SSLContext:
        """Present the front-proxy client certificate; verify the worker if its CA is known.

        Without a CA this matches an ``APIService`` with ``insecureSkipTLSVerify``.
        """
        context = ssl.create_default_context(cafile=self.state.worker_ca)
        if self.state.worker_ca is None:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        context.load_cert_chain(str(self.state.pki.front_proxy_client))
        return context
