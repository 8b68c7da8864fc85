"""hypercorn's HTTP/2 protocol with the closed-stream defects fixed.

A server may answer before it has read the whole request (RFC 9113 §8.1: a 401, a 405, a
413). hypercorn 0.18 then forgets the stream while the client is still sending its body, and
the next DATA frame for it raises ``KeyError`` out of the connection's task group — past the
connection, through ``trio.serve_listeners``, ending the whole server. One unauthenticated
``POST`` with a body was enough to stop a daemon.

:class:`HardenedH2Protocol` does what the RFC asks instead:

* DATA for a stream the server has finished is acknowledged (its bytes are returned to the
  connection's flow-control window, so other streams keep moving) and dropped;
* as soon as the complete response is out while the client is still sending, the stream is
  reset with ``NO_ERROR`` — "stop sending, the answer is out" — so the client stops uploading
  (and is not left waiting on a flow-control window the app will never reopen);
* the sending task tolerates a stream that disappeared between being scheduled and being sent;
* a connection is never closed for the number of requests it has carried. hypercorn closed an
  HTTP/2 connection after ``keep_alive_max_requests`` (1,000) by a GOAWAY after which h2 sends
  nothing more, so the answers still in flight on it were lost (RFC 9113 §6.8 wants streams up
  to the GOAWAY's last stream ID answered). kube-aggregator carries every user's reads to the
  worker over one such connection: 32 readers through it got 503 "server sent GOAWAY and closed
  the connection" and aborted connections every thousand requests. kube-apiserver puts no count
  on an HTTP/2 connection either; HTTP/1.1's count (a graceful ``Connection: close``) stays.

hypercorn chooses its HTTP/2 class by the name ``H2Protocol`` in ``hypercorn.protocol`` when a
connection negotiates ``h2``; :func:`install` points that name at this class, once per
process, for every server in it. :mod:`gpustack_serving.connections` also contains any failure
to its own connection, so a defect this does not cover costs one connection, never the server.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import sys

import h2.errors
import h2.events
import h2.exceptions
import hypercorn.protocol
from h2.stream import StreamState
from hypercorn.config import Config
from hypercorn.protocol.events import Event as StreamEvent
from hypercorn.protocol.events import Response
from hypercorn.protocol.h2 import H2Protocol
from priority.priority import MissingStreamError

log = logging.getLogger("gpustack.serving.h2")

_UPSTREAM = H2Protocol


class HardenedH2Protocol(H2Protocol):
    """hypercorn's ``H2Protocol`` that survives a request body outliving its response."""

    @property
    def config(self) -> Config:
        """The server's Config, without a request count on the connection (see the module)."""
        return self._lifted

    @config.setter
    def config(self, value: Config) -> None:
        # A copy: the server's Config (and its HTTP/1.1 connections' count) stays as it was.
        self._lifted = copy.copy(value)
        self._lifted.keep_alive_max_requests = sys.maxsize

    async def _handle_events(self, events: list[h2.events.Event]) -> None:
        # Events are handled one at a time: a stream opened by an earlier event of the same
        # batch must be known before its DATA is judged orphaned.
        for event in events:
            if isinstance(event, h2.events.DataReceived) and event.stream_id not in self.streams:
                self._discard(event)
                continue
            await super()._handle_events([event])

    def _discard(self, event: h2.events.DataReceived) -> None:
        """Return an orphaned DATA frame's bytes to the window, drop them, stop the upload.

        Once the answer's END_STREAM is out (the stream is half-closed on our side), RFC 9113
        §8.1 lets the server ask the client to abort the rest of its body with ``NO_ERROR``.
        Before that (the answer is still being flushed) the bytes are only dropped: a reset
        then would cut the answer short.
        """
        stream_id = event.stream_id
        try:
            self.connection.acknowledge_received_data(event.flow_controlled_length, stream_id)
        except h2.exceptions.H2Error as exc:  # the stream or connection is going already
            log.debug("h2: orphaned DATA on stream %s: %s", stream_id, exc)
        self._stop_upload(stream_id)

    async def stream_send(self, event: StreamEvent) -> None:
        """As hypercorn's, except that a response's headers wait for the sending task.

        hypercorn wrote the headers at once, then the body, then END_STREAM: three writes, each
        its own TLS record and ``send``, and three for the peer (kube-aggregator) to read. Here
        the headers are queued and the sending task woken: it writes them with whatever of the
        body is there by then, and never later than its next turn, so a response whose body
        comes later (a watch) still has its headers out at once.
        """
        if not isinstance(event, Response):
            await super().stream_send(event)
            return
        headers = [(b":status", b"%d" % event.status_code), *event.headers]
        try:
            self.connection.send_headers(
                event.stream_id, headers + self.config.response_headers("h2")
            )
        except h2.exceptions.ProtocolError:
            return  # the stream or the connection closed meanwhile, as hypercorn ignores it
        try:
            self.priority.unblock(event.stream_id)
        except MissingStreamError:  # not the sending task's: write the headers now
            await self._flush()
            return
        await self.has_data.set()

    async def _send_data(self, stream_id: int) -> None:
        """One frame of the stream's body (and END_STREAM once it is all out), in one write.

        hypercorn's wrote the frame and END_STREAM apart; this also tolerates a stream that
        finished between being scheduled and being sent, and stops an upload the complete
        answer made pointless (:meth:`_stop_upload`).
        """
        buffer = self.stream_buffers.get(stream_id)
        if buffer is None:  # finished between scheduling and sending
            with contextlib.suppress(MissingStreamError):
                self.priority.remove_stream(stream_id)
            await self._flush()  # its headers, if they were all it had
            return
        try:
            size = min(
                self.connection.local_flow_control_window(stream_id),
                self.connection.max_outbound_frame_size,
            )
            data = await buffer.pop(max(0, size))
            if data:
                self.connection.send_data(stream_id, data)
            else:
                self.priority.block(stream_id)
            if buffer.complete:
                self.connection.end_stream(stream_id)
                del self.stream_buffers[stream_id]
                self.priority.remove_stream(stream_id)
                self._stop_upload(stream_id)
        except (h2.exceptions.StreamClosedError, KeyError, h2.exceptions.ProtocolError):
            # The stream or the connection closed while this waited: drop what is left.
            await buffer.close()
            self.stream_buffers.pop(stream_id, None)
            with contextlib.suppress(MissingStreamError):
                self.priority.remove_stream(stream_id)
        await self._flush()

    def _stop_upload(self, stream_id: int) -> None:
        """Reset with ``NO_ERROR`` a stream answered in full while its body is still coming.

        Without it a client blocked on the stream's flow-control window (the app stopped
        reading: a 413, a 401) waits for a WINDOW_UPDATE that never comes, until the idle
        timer closes the whole connection — every other stream on it too.
        """
        stream = self.connection.streams.get(stream_id)
        if stream is None or stream.state_machine.state is not StreamState.HALF_CLOSED_LOCAL:
            return
        try:
            self.connection.reset_stream(stream_id, h2.errors.ErrorCodes.NO_ERROR)
        except h2.exceptions.H2Error as exc:
            log.debug("h2: stream %s answered early could not be reset: %s", stream_id, exc)


def install() -> None:
    """Make every hypercorn server in this process negotiate ``h2`` with the hardened class.

    Idempotent. Raises ``RuntimeError`` if hypercorn no longer picks its class by that name,
    so an upgrade that would silently bypass the fix fails loudly instead.
    """
    current = getattr(hypercorn.protocol, "H2Protocol", None)
    if current is HardenedH2Protocol:
        return
    if current is not _UPSTREAM:
        raise RuntimeError(
            "hypercorn.protocol.H2Protocol is not the class this fix derives from; "
            "re-check gpustack_serving.h2 against the installed hypercorn"
        )
    setattr(hypercorn.protocol, "H2Protocol", HardenedH2Protocol)  # noqa: B010 — the name is the seam
