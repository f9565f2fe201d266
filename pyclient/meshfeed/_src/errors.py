"""meshfeed's exceptions, the mapping of Flight/gRPC errors onto them, and
which of them a Loader recovers from."""

from __future__ import annotations

import dataclasses
import re

import pyarrow as pa
import pyarrow.flight as flight


class MeshfeedError(Exception):
    """Base of every error meshfeed raises.

    Errors that come from the server carry the gRPC status code name in
    ``code`` (for example ``"NOT_FOUND"``) and the server's message in
    ``server_message``; both are ``None`` for errors raised by the client.
    ``detail`` is the server's machine-readable detail (a
    :class:`StatusDetail`) when it sent one, else None.
    """

    def __init__(self, message: str, *, code: str | None = None, server_message: str | None = None,
                 detail: "StatusDetail | None" = None):
        super().__init__(message)
        self.code = code
        self.server_message = server_message
        self.detail = detail


class InvalidRequestError(MeshfeedError, ValueError):
    """A request the server (INVALID_ARGUMENT) or the client refuses as malformed."""


class NotFoundError(MeshfeedError):
    """A dataset (file, object or glob without match) does not exist (NOT_FOUND)."""


class PermissionDeniedError(MeshfeedError):
    """A dataset lies outside the server's allowed roots, or the token is
    missing or wrong (PERMISSION_DENIED, UNAUTHENTICATED)."""


class PlanError(MeshfeedError):
    """The request cannot be planned on this dataset (FAILED_PRECONDITION):
    ``last_batch="raise"`` with ``N % B != 0``, no full step, a start position
    past the end, files whose schemas disagree; or the server's plan disagrees
    with the client's own computation."""


class UnavailableError(MeshfeedError):
    """The server or its storage is unavailable for now (UNAVAILABLE,
    DEADLINE_EXCEEDED); retrying later may help."""


class ResourceExhaustedError(MeshfeedError):
    """The server serves its maximum number of streams, or a step exceeds the
    maximum message size (RESOURCE_EXHAUSTED)."""


class BinaryNotFoundError(MeshfeedError, FileNotFoundError):
    """No ``meshfeed`` server binary was found; the message lists every place tried."""


class StateMismatchError(MeshfeedError, ValueError):
    """A checkpoint state was taken from a loader with another configuration."""


# gRPC status codes by number (grpc/status.proto).
GRPC_CODES = ("OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
              "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
              "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED")
# The one table of status code names onto exceptions, for every path an error
# arrives by: a Flight error (from_flight: the server's detail, or the code
# pyarrow's exception type or message names) and the shared-memory wire's
# error frames (from_code). A code not in it is a plain MeshfeedError.
CLASS_OF_CODE: dict[str, type[MeshfeedError]] = {
    "INVALID_ARGUMENT": InvalidRequestError, "OUT_OF_RANGE": InvalidRequestError,
    "UNIMPLEMENTED": InvalidRequestError, "NOT_FOUND": NotFoundError, "PERMISSION_DENIED": PermissionDeniedError,
    "UNAUTHENTICATED": PermissionDeniedError, "FAILED_PRECONDITION": PlanError,
    "RESOURCE_EXHAUSTED": ResourceExhaustedError, "UNAVAILABLE": UnavailableError,
    "DEADLINE_EXCEEDED": UnavailableError,
}
# Codes after which the same request may succeed later: the server (or its
# storage) is gone or overloaded for now. A killed server ends a stream with
# UNAVAILABLE (pyarrow's FlightUnavailableError), over TCP and Unix sockets.
RECOVERABLE_CODES = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED"})

_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"
_ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"


@dataclasses.dataclass(frozen=True)
class StatusDetail:
    """The server's machine-readable detail of an error: the
    ``google.rpc.Status`` a gRPC server attaches with its details
    (``grpc-status-details-bin``; pyarrow hands it over as ``extra_info``).

    Attributes:
        code: the gRPC code name (exact, where pyarrow's exception types
            collapse several codes into one).
        message: the status message.
        retry: the server says the same request may succeed later (a
            ``google.rpc.RetryInfo`` detail); ``retry_delay`` its delay in seconds.
        reason, domain, metadata: a ``google.rpc.ErrorInfo`` detail, if any.
    """

    code: str
    message: str
    retry: bool = False
    retry_delay: float | None = None
    reason: str | None = None
    domain: str | None = None
    metadata: dict[str, str] = dataclasses.field(default_factory=dict)


def _varint(b: bytes, i: int) -> tuple[int, int]:
    x = shift = 0
    while True:
        if i >= len(b) or shift > 63:
            raise ValueError("truncated varint")
        c = b[i]
        i += 1
        x |= (c & 0x7F) << shift
        if c < 0x80:
            return x, i
        shift += 7


def _fields(b: bytes) -> list[tuple[int, int | bytes]]:
    """The (field number, value) pairs of one protobuf message (varint and
    length-delimited values; fixed-width ones skipped)."""
    out: list[tuple[int, int | bytes]] = []
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = _varint(b, i)
            out.append((num, v))
        elif wire == 2:
            n, i = _varint(b, i)
            if i + n > len(b):
                raise ValueError("truncated field")
            out.append((num, b[i:i + n]))
            i += n
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
        else:
            raise ValueError(f"wire type {wire}")
    return out


def status_detail(extra_info: bytes | None) -> StatusDetail | None:
    """Decodes the ``google.rpc.Status`` in a Flight error's ``extra_info``;
    None when there is none or it does not decode (a server that sends no
    detail, or another Flight server's bytes)."""
    if not extra_info:
        return None
    try:
        code, message, details = None, "", []
        for num, v in _fields(bytes(extra_info)):
            if num == 1 and isinstance(v, int):
                code = v
            elif num == 2 and isinstance(v, bytes):
                message = v.decode("utf-8", "replace")
            elif num == 3 and isinstance(v, bytes):
                any_ = dict(_fields(v))
                details.append((bytes(any_.get(1, b"")).decode("utf-8", "replace"), bytes(any_.get(2, b""))))
        if code is None or not 0 < code < len(GRPC_CODES):
            return None
        kw: dict = {}
        for url, value in details:
            if url == _RETRY_INFO:
                kw["retry"] = True
                delay = dict(_fields(value)).get(1)
                if isinstance(delay, bytes):
                    d = dict(_fields(delay))
                    kw["retry_delay"] = int(d.get(1, 0)) + int(d.get(2, 0)) / 1e9
            elif url == _ERROR_INFO:
                f = _fields(value)
                kw["reason"] = next((bytes(v).decode() for n, v in f if n == 1 and isinstance(v, bytes)), None)
                kw["domain"] = next((bytes(v).decode() for n, v in f if n == 2 and isinstance(v, bytes)), None)
                kw["metadata"] = {bytes(e.get(1, b"")).decode(): bytes(e.get(2, b"")).decode()
                                  for e in (dict(_fields(v)) for n, v in f if n == 3 and isinstance(v, bytes))}
        return StatusDetail(code=GRPC_CODES[code], message=message, **kw)
    except (ValueError, UnicodeDecodeError):
        return None


def recoverable(exc: BaseException) -> bool:
    """Whether a Loader retries after ``exc`` broke its stream, decided by
    type and code, never by the words of a message: a lost connection
    (ConnectionError), a server error whose code is UNAVAILABLE or
    DEADLINE_EXCEEDED, or any server error whose detail says retry
    (``google.rpc.RetryInfo``)."""
    if isinstance(exc, ConnectionError):
        return True
    exc = from_flight(exc)
    if not isinstance(exc, MeshfeedError):
        return False
    return exc.code in RECOVERABLE_CODES or (exc.detail is not None and exc.detail.retry)


# pyarrow collapses INVALID_ARGUMENT, FAILED_PRECONDITION and RESOURCE_EXHAUSTED
# into ArrowInvalid; its message names the code ("... precondition failed
# error, with message: ..."), see docs/PROTOCOL.md.
_CODE_WORDS = [
    ("precondition failed", "FAILED_PRECONDITION"),
    ("resource exhausted", "RESOURCE_EXHAUSTED"),
    ("invalid argument", "INVALID_ARGUMENT"),
    ("not found", "NOT_FOUND"),
    ("unavailable", "UNAVAILABLE"),
]
# The code each pyarrow Flight error type stands for (pyarrow collapses several
# codes into some of them: the first that matches decides).
_CODE_OF_TYPE: list[tuple[type[BaseException], str]] = [
    (flight.FlightUnavailableError, "UNAVAILABLE"),
    (flight.FlightUnauthorizedError, "PERMISSION_DENIED"),
    (flight.FlightUnauthenticatedError, "UNAUTHENTICATED"),
    (flight.FlightTimedOutError, "DEADLINE_EXCEEDED"),
    (flight.FlightCancelledError, "CANCELLED"),
    (flight.FlightInternalError, "INTERNAL"),
    (pa.ArrowKeyError, "NOT_FOUND"),
    (pa.ArrowNotImplementedError, "UNIMPLEMENTED"),
]

_PREFIX = re.compile(r"^(?:Flight|gRPC) returned (?P<what>[a-z ]+?) error, with message: ", re.S)
_SUFFIX = re.compile(r"\.? ?(?:gRPC client debug context|Client context|Detail):.*$", re.S)


def _server_message(msg: str) -> tuple[str | None, str]:
    """Splits pyarrow's message into (code words, server message)."""
    m = _PREFIX.match(msg)
    if not m:
        return None, msg.strip()
    rest = _SUFFIX.sub("", msg[m.end():]).strip()
    return m.group("what"), rest


def from_flight(exc: BaseException) -> BaseException:
    """Returns the meshfeed exception for an error raised by pyarrow.flight.

    Exceptions that are not Arrow/Flight errors are returned unchanged.
    """
    if isinstance(exc, MeshfeedError) or not isinstance(exc, (pa.ArrowException, flight.FlightError)):
        return exc
    text = str(exc)
    words, server_msg = _server_message(text)
    code: str | None = None
    detail = status_detail(getattr(exc, "extra_info", None))
    if detail is not None:
        # The server's own status: its code is exact (pyarrow raises
        # FlightInternalError for any code that carries a detail).
        code = detail.code
        server_msg = detail.message or server_msg
    else:
        code = next((c for t, c in _CODE_OF_TYPE if isinstance(exc, t)), None)
        if code is None:
            if isinstance(exc, pa.ArrowInvalid):
                code = "INVALID_ARGUMENT"
            # pyarrow collapses several codes into one exception type; the code
            # word in the server's message (docs/PROTOCOL.md) tells them apart.
            code = next((c for w, c in _CODE_WORDS if words is not None and w in words), code)
    cls = CLASS_OF_CODE.get(code or "", MeshfeedError)
    label = f" ({code})" if code else ""
    err = cls(f"meshfeed server{label}: {server_msg}", code=code, server_message=server_msg, detail=detail)
    err.__cause__ = exc
    return err


def from_code(code: str | None, message: str) -> MeshfeedError:
    """Returns the meshfeed exception for a server error given by its status
    code's name (``"FAILED_PRECONDITION"``) and message (CLASS_OF_CODE)."""
    cls = CLASS_OF_CODE.get(code or "", MeshfeedError)
    label = f" ({code})" if code else ""
    return cls(f"meshfeed server{label}: {message}", code=code, server_message=message)
