"""A raw HTTP/2 client for attack-shaped requests: frames sent exactly as a test says.

httpx (through httpcore) gives up on an upload once the server answers early, so it cannot show
what a server does with the rest of the body. This drives ``h2`` over trio's TLS directly: it
opens a stream, sends a body larger than the initial window, keeps sending after the answer
arrived (as curl and kube-aggregator's Go client may), and then asks a second question on the
same connection. Every step is bounded by a deadline.
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import trio

CHUNK = 16384


@dataclass
class Answer:
    """One stream's outcome: the status, the body, and whether the server reset it (and how)."""

    status: int | None = None
    body: bytearray = field(default_factory=bytearray)
    ended: bool = False
    reset: int | None = None


class H2Probe:
    """One HTTP/2 connection over TLS to ``host:port``."""

    def __init__(self, stream: trio.SSLStream[trio.SocketStream], authority: str) -> None:
        self.stream = stream
        self.authority = authority
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.answers: dict[int, Answer] = {}
        self.closed = False

    @classmethod
    async def open(cls, url: str, context: ssl.SSLContext | None = None) -> H2Probe:
        """Connect to ``https://host:port`` negotiating ``h2`` (certificate not verified)."""
        authority = url.removeprefix("https://").rstrip("/")
        host, port = authority.rsplit(":", 1)
        if context is None:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        context.set_alpn_protocols(["h2"])
        tcp = await trio.open_tcp_stream(host.strip("[]"), int(port))
        tls = trio.SSLStream(tcp, context, server_hostname=host.strip("[]"))
        await tls.do_handshake()
        if tls.selected_alpn_protocol() != "h2":
            raise AssertionError(f"server did not negotiate h2: {tls.selected_alpn_protocol()}")
        probe = cls(tls, authority)
        probe.conn.initiate_connection()
        await probe._flush()
        return probe

    async def _flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            await self.stream.send_all(data)

    def _headers(
        self, method: str, path: str, extra: list[tuple[str, str]]
    ) -> list[tuple[str, str]]:
        return [
            (":method", method),
            (":path", path),
            (":scheme", "https"),
            (":authority", self.authority),
            *extra,
        ]

    async def _pump(self) -> None:
        """Read one batch of frames and record what they say."""
        data = await self.stream.receive_some(65536)
        if not data:
            self.closed = True
            return
        for event in self.conn.receive_data(data):
            answer = self.answers.setdefault(getattr(event, "stream_id", 0) or 0, Answer())
            if isinstance(event, h2.events.ResponseReceived):
                answer.status = int(dict(event.headers)[b":status"])
            elif isinstance(event, h2.events.DataReceived):
                answer.body += event.data
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                answer.ended = True
            elif isinstance(event, h2.events.StreamReset):
                answer.reset = int(event.error_code)
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.closed = True
        await self._flush()

    async def upload(
        self, method: str, path: str, size: int, headers: Sequence[tuple[str, str]] = ()
    ) -> Answer:
        """Send ``size`` bytes of body, continuing after any early answer, until done or reset."""
        sid = self.conn.get_next_available_stream_id()
        answer = self.answers.setdefault(sid, Answer())
        self.conn.send_headers(
            sid, self._headers(method, path, [("content-length", str(size)), *headers])
        )
        await self._flush()
        left = size
        while left > 0 and answer.reset is None and not self.closed:
            window = min(self.conn.local_flow_control_window(sid), CHUNK, left)
            if window <= 0:
                await self._pump()
                continue
            try:
                self.conn.send_data(sid, b"x" * window, end_stream=(left == window))
            except h2.exceptions.StreamClosedError:
                break
            left -= window
            await self._flush()
            # Read what arrived meanwhile without waiting for it.
            with trio.move_on_after(0):
                await self._pump()
        while not (answer.ended or answer.reset is not None or self.closed):
            await self._pump()
        return answer

    async def get(self, path: str, headers: Sequence[tuple[str, str]] = ()) -> Answer:
        """One GET on this connection, to its end."""
        sid = self.conn.get_next_available_stream_id()
        answer = self.answers.setdefault(sid, Answer())
        self.conn.send_headers(sid, self._headers("GET", path, headers), end_stream=True)
        await self._flush()
        while not (answer.ended or answer.reset is not None or self.closed):
            await self._pump()
        return answer

    async def aclose(self) -> None:
        """Say goodbye (GOAWAY) and close the socket."""
        try:
            self.conn.close_connection()
            await self._flush()
        except (trio.BrokenResourceError, trio.ClosedResourceError, h2.exceptions.H2Error):
            pass
        await trio.aclose_forcefully(self.stream)
