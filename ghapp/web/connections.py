"""HTTP connections that cannot pile up: a header deadline, and the idlest shed first.

uvicorn's HTTP/1.1 protocols close a connection that stays idle *after* a response
(``timeout_keep_alive``), but one that never sends a request, or sends its headers a
byte at a time, stays open for ever. Each holds a file descriptor: past the open-file
limit ``accept()`` fails, and the server is unreachable for everyone, GitHub included.
:func:`guarded_httptools` (the default, with httptools installed) and
:class:`GuardedH11` (where httptools cannot install) add two rules to uvicorn's
protocol:

- **a header deadline**: from the moment a connection opens, and again after each
  response, the next request's headers must be complete within ``header_timeout_s``
  (10 s), else the connection is closed. A request being read or answered is never
  cut: the deadline ends when its headers are in.
- **shedding**: past ``max_connections`` open connections, each new one closes the
  connection idle the longest (no request in progress), so a new client, a webhook,
  is served rather than refused.

With httptools, two more (h11 has the first of its own, at 16 KiB, and reads a body
after an Upgrade header): a request whose line and headers pass :data:`HEAD_MAX_BYTES`
is answered 431 and its connection closed (httptools has no such bound, and copies a
header's value again with each read: one sender's header of megabytes held the event
loop for seconds, and every webhook waited); and a request with an ``Upgrade`` header
(HTTP/2's ``h2c``, as ``curl --http2`` sends) is answered 400, saying so, before the app
sees it (httptools reads no body after one, and a signed delivery was refused as if its
secret were wrong).

asyncio accepts up to ``backlog`` connections per turn of its loop before any of them
is seen here, two turns later: the reserve below the open-file limit covers four such
bursts, so that shedding keeps ``accept()`` clear of ``EMFILE``. Should it fail anyway,
asyncio logs a traceback for each failed ``accept()`` of the burst; that is folded into
one line every 10 s.

:func:`http_config` builds the uvicorn configuration with them (httptools on uvloop
when they are installed, else h11 on asyncio; ``AUTOLOOP_HTTP``/``AUTOLOOP_LOOP`` or
``autoloop serve --http/--loop`` pick one), and
:func:`raise_open_files` lifts this process's soft open-file limit to its hard limit
(``autoloop serve`` calls it first): ``max_connections`` is that limit, less a reserve
for the ledger, the logs, GitHub's connections and the agents' pipes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import importlib.util
import logging
import resource
import weakref
from typing import Any, cast

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = [
    "HEADER_TIMEOUT_S",
    "GuardedH11",
    "OpenFiles",
    "backlog_for",
    "event_loop",
    "guarded_h11",
    "guarded_httptools",
    "guarded_protocol",
    "http_config",
    "max_connections_for",
    "raise_open_files",
]

HEADER_TIMEOUT_S = 10.0
HEAD_MAX_BYTES = 32 * 1024  # a request's line and headers (GitHub's: about 2 KiB)
UPGRADE_REFUSED = (
    "an Upgrade header (HTTP/2 over plain HTTP, h2c) is not supported here: send the "
    "request as HTTP/1.1 without it (curl: --http1.1)"
)
_REASONS = {400: b"Bad Request", 431: b"Request Header Fields Too Large"}
KEEP_ALIVE_S = 5  # idle between two requests on one connection (uvicorn's default)
RESERVE_MIN = 64  # descriptors kept for everything but client connections
BACKLOG_MAX = 2048  # uvicorn's default listen backlog
ACCEPT_ERROR = "socket.accept() out of system resource"
QUIET_S = 10.0  # one line per this many seconds about failed accepts

log = logging.getLogger("autoloop.web")
_quieted: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


class _Guard:
    """The header deadline and shedding, for either of uvicorn's HTTP/1.1 protocols.

    A subclass says whether the current request's headers are complete
    (:meth:`_head_done`) and how to close (:meth:`_close`)."""

    header_timeout_s: float = HEADER_TIMEOUT_S
    max_connections: int | None = None
    # set by uvicorn's protocol classes
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    connections: set[Any]
    cycle: Any

    def _guard_opened(self) -> None:
        if self.loop not in _quieted:
            _quiet_accept_errors(self.loop)
        self._idle_since = self.loop.time()
        self._deadline: asyncio.TimerHandle | None = None  # the timer, when one is set
        self._armed_at: float | None = None  # since when headers are awaited (None: not)
        self._arm()
        limit = self.max_connections
        if limit is not None and len(self.connections) > limit:
            self._shed(len(self.connections) - limit)

    def _guard_response_done(self) -> None:
        if not self.transport.is_closing() and not self._head_done():
            self._idle_since = self.loop.time()
            self._arm()

    def _head_done(self) -> bool:
        """Whether the request's head is in; each parser's class answers it (below)."""
        raise NotImplementedError  # the mixin alone is never a protocol

    def _close(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()

    # -- the deadline --------------------------------------------------------------------
    # Arming and disarming only note the time: a busy connection would otherwise cancel
    # and set a timer for every request. One timer per connection looks when it fires,
    # and sets itself again for what is left if headers were awaited since less long.

    def _arm(self) -> None:
        self._armed_at = self.loop.time()
        if self._deadline is None:
            self._deadline = self.loop.call_later(self.header_timeout_s, self._headers_late)

    def _disarm(self) -> None:
        self._armed_at = None

    def _drop_timer(self) -> None:
        self._armed_at = None
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _headers_late(self) -> None:
        self._deadline = None
        if self._armed_at is None or self._head_done():
            return  # not awaiting headers: the next response arms it again
        left = self._armed_at + self.header_timeout_s - self.loop.time()
        if left > 0:
            self._deadline = self.loop.call_later(left, self._headers_late)
        else:
            self._close()

    # -- shedding ------------------------------------------------------------------------

    def idle(self) -> bool:
        """No request in progress: waiting for one (or for the rest of its headers)."""
        busy = self.cycle is not None and not self.cycle.response_complete
        return not busy and not self._head_done() and not self.transport.is_closing()

    def _shed(self, count: int) -> None:
        idle = [c for c in self.connections if c is not self and isinstance(c, _Guard) and c.idle()]
        for conn in heapq.nsmallest(count, idle, key=lambda c: c._idle_since):
            conn._close()


class GuardedH11(_Guard, H11Protocol):
    """uvicorn's h11 protocol with a header deadline and shedding (see the module)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # as uvicorn: its transport is always a Transport
        super().connection_made(transport)
        self._guard_opened()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._armed_at is not None and self._head_done():
            self._disarm()  # the headers are in: the request is the app's to read now

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._guard_response_done()

    def connection_lost(self, exc: Exception | None) -> None:
        self._drop_timer()
        super().connection_lost(exc)

    def _head_done(self) -> bool:
        # h11 leaves IDLE only once a request's headers are complete
        return self.conn.their_state is not h11.IDLE

    def _close(self) -> None:
        if self.transport.is_closing():
            return
        with contextlib.suppress(h11.LocalProtocolError):
            self.conn.send(h11.ConnectionClosed())
        self.transport.close()


@functools.cache
def guarded_httptools() -> type[_Guard] | None:
    """uvicorn's httptools protocol with a header deadline and shedding (see the module);
    None where httptools is not installed (it could not install)."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol  # noqa: PLC0415  # optional: only with httptools installed
    except ImportError:  # pragma: no cover  # httptools absent
        return None

    class GuardedHttpTools(_Guard, HttpToolsProtocol):
        _heads_in = False  # the current request's head is in (the deadline's state)
        _in_body = False  # from a head's end to its message's end: what comes is its body
        _head_bytes = 0  # received outside bodies since the last head ended
        _refused = False  # refused before the app: nothing more is read
        _later: tuple[int, str] | None = None  # a refusal waiting for the answer under way

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # as uvicorn: its transport is always a Transport
            super().connection_made(transport)
            self._heads_in, self._in_body, self._head_bytes = False, False, 0
            self._refused, self._later = False, None
            self._guard_opened()

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            if self._in_body:  # a body (or its end, and what follows it): as uvicorn
                super().data_received(data)
                return
            self._head_bytes += len(data)
            super().data_received(data)
            if (
                self._head_bytes > HEAD_MAX_BYTES
                and not self._in_body
                and not self.transport.is_closing()  # (uvicorn refused it already)
            ):
                # httptools copies a header's value again with each read: a head of
                # megabytes, fed 64 KiB at a time, held the event loop for seconds
                self._refuse(431, f"request headers over {HEAD_MAX_BYTES // 1024} KiB")

        def on_headers_complete(self) -> None:
            self._heads_in, self._in_body, self._head_bytes = True, True, 0
            self._disarm()  # the headers are in: the request is the app's to read now
            if self.parser.should_upgrade() and not self._should_upgrade():
                # httptools reads no body after an Upgrade header (HTTP/2's ``h2c``): the
                # app got an empty one, and a signed request was refused as if its
                # secret were wrong
                self._refuse(400, UPGRADE_REFUSED)
                return
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._in_body = False
            if not self._refused:
                super().on_message_complete()

        def _unsupported_upgrade_warning(self) -> None:
            if not self._refused:  # (said in the answer: no warning about WebSockets)
                super()._unsupported_upgrade_warning()

        def _refuse(self, status: int, why: str) -> None:
            self._refused = True
            log.info("refused a request from %s with %d: %s", self.client, status, why)
            if (self.cycle is not None and not self.cycle.response_complete) or self.pipeline:
                # an earlier request on this connection is answered first, whole
                self._later = (status, why)
                self.flow.pause_reading()
                return
            self._answer_and_close(status, why)

        def _answer_and_close(self, status: int, why: str) -> None:
            text = f"{why}\n".encode()
            self.transport.write(
                b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n%s"
                % (status, _REASONS[status], len(text), text)
            )
            self.transport.close()

        def on_response_complete(self) -> None:
            # A pipelined request whose head is in starts next: its head is no longer
            # awaited (the deadline armed here cut its answer short, a second after)
            queued = bool(self.pipeline)
            if not queued:
                self._heads_in = False
            if self._later is not None and not queued and not self.transport.is_closing():
                self._answer_and_close(*self._later)
            super().on_response_complete()  # (it does nothing more once closing)
            if not queued:
                self._guard_response_done()

        def connection_lost(self, exc: Exception | None) -> None:
            self._drop_timer()
            super().connection_lost(exc)

        def _head_done(self) -> bool:
            return self._heads_in

    return GuardedHttpTools


def guarded_h11(
    *, header_timeout_s: float = HEADER_TIMEOUT_S, max_connections: int | None = None
) -> type[GuardedH11]:
    """The h11 protocol class for one server, with its deadline and its connection cap."""
    return type(
        "GuardedH11",
        (GuardedH11,),
        {"header_timeout_s": header_timeout_s, "max_connections": max_connections},
    )


def guarded_protocol(
    http: str = "auto",
    *,
    header_timeout_s: float = HEADER_TIMEOUT_S,
    max_connections: int | None = None,
) -> type[_Guard]:
    """The protocol class for one server: ``httptools`` (the faster parser, when it is
    installed), ``h11``, or ``auto`` (httptools if it imports, else h11)."""
    if http not in ("auto", "httptools", "h11"):
        raise ValueError(f"unknown HTTP protocol {http!r}: choose auto, httptools or h11")
    fast = guarded_httptools() if http != "h11" else None
    if http == "httptools" and fast is None:
        raise ValueError("httptools is not installed: pip install httptools, or use h11")
    base: type[_Guard] = fast or GuardedH11
    return type(
        base.__name__,
        (base,),
        {"header_timeout_s": header_timeout_s, "max_connections": max_connections},
    )


def event_loop(loop: str = "auto") -> str:
    """uvicorn's ``loop`` setting: ``uvloop`` (when installed), ``asyncio``, or ``auto``
    (uvloop if it imports, else asyncio)."""
    if loop not in ("auto", "uvloop", "asyncio"):
        raise ValueError(f"unknown event loop {loop!r}: choose auto, uvloop or asyncio")
    if loop == "uvloop" and importlib.util.find_spec("uvloop") is None:
        raise ValueError("uvloop is not installed: pip install uvloop, or use asyncio")
    return loop


def stack_names(http: str = "auto", loop: str = "auto") -> tuple[str, str]:
    """The event loop and HTTP parser a server with these settings runs on, ``auto``
    resolved (``("uvloop", "httptools")`` on the fast stack)."""
    if loop == "auto":
        loop = "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"
    if http == "auto":
        http = "httptools" if guarded_httptools() is not None else "h11"
    return loop, http


def backlog_for(open_files: int) -> int:
    """Connections accepted per turn of the event loop (and the listen queue)."""
    return max(16, min(BACKLOG_MAX, open_files // 8))


def max_connections_for(open_files: int) -> int:
    """Client connections a process may hold under ``open_files`` descriptors: less a
    reserve for the rest of the process and for four bursts of accepts in flight."""
    reserve = max(open_files // 8, RESERVE_MIN + 4 * backlog_for(open_files))
    return max(16, open_files - reserve)


def _quiet_accept_errors(loop: asyncio.AbstractEventLoop) -> None:
    """Fold asyncio's traceback per failed ``accept()`` (and its retries' errors once
    the server closed) into one line every :data:`QUIET_S`; pass the rest on."""
    _quieted.add(loop)
    previous = loop.get_exception_handler()
    last = -QUIET_S
    folded = 0

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        nonlocal last, folded
        message = str(context.get("message", ""))
        if message == ACCEPT_ERROR or "_start_serving" in repr(context.get("handle")):
            folded += 1
            now = loop.time()
            if now - last >= QUIET_S:
                log.warning(
                    "accept() failed %d time(s): %s (open files exhausted; idle "
                    "connections are being closed)",
                    folded,
                    context.get("exception"),
                )
                last, folded = now, 0
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)


def http_config(
    app: Any,
    *,
    host: str,
    port: int,
    header_timeout_s: float = HEADER_TIMEOUT_S,
    max_connections: int | None = None,
    http: str = "auto",
    loop: str = "auto",
    **options: Any,
) -> uvicorn.Config:
    """uvicorn's configuration for our app: httptools (or h11) guarded by a header
    deadline and shedding, on uvloop (or asyncio). ``auto`` takes the faster one when it
    is installed. Without ``max_connections``, the cap comes from this process's
    open-file limit."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    limited = soft != resource.RLIM_INFINITY
    if max_connections is None and limited:
        max_connections = max_connections_for(soft)
    protocol = guarded_protocol(
        http, header_timeout_s=header_timeout_s, max_connections=max_connections
    )
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=cast("type[asyncio.Protocol]", protocol),  # both bases are asyncio protocols
        loop=event_loop(loop),
        ws="none",  # no websocket routes: nothing of a websocket library is loaded
        # The app starts and stops nothing of its own (serve does, around it): with the
        # lifespan on, a second Ctrl-C cancelled its task and Starlette logged a traceback.
        lifespan="off",
        timeout_keep_alive=KEEP_ALIVE_S,
        backlog=backlog_for(soft) if limited else BACKLOG_MAX,
        **options,
    )


class OpenFiles:
    """This process's open-file limit: what it was, and what it is."""

    def __init__(self, before: int, after: int, hard: int) -> None:
        self.before = before
        self.after = after
        self.hard = hard

    def line(self) -> str:
        cap = max_connections_for(self.after)
        if self.after > self.before:
            return (
                f"open-file limit raised from {self.before} to {self.after}: "
                f"up to {cap} client connections, the idlest closed first past that"
            )
        return (
            f"open-file limit {self.after} (hard limit {self.hard}): up to {cap} client "
            "connections, the idlest closed first past that"
        )


def raise_open_files() -> OpenFiles:
    """Lift the soft RLIMIT_NOFILE to the hard limit (an unprivileged process may)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):  # e.g. macOS caps the soft limit below "unlimited"
            target = soft
    else:
        target = soft
    return OpenFiles(before=soft, after=target, hard=hard)
