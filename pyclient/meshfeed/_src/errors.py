"""meshfeed's exceptions and the mapping of Flight/gRPC errors onto them."""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.flight as flight


class MeshfeedError(Exception):
    """Base of every error meshfeed raises.

    Errors that come from the server carry the gRPC status code name in
    ``code`` (for example ``"NOT_FOUND"``) and the server's message in
    ``server_message``; both are ``None`` for errors raised by the client.
    """

    def __init__(self, message: str, *, code: str | None = None, server_message: str | None = None):
        super().__init__(message)
        self.code = code
        self.server_message = server_message


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


# pyarrow collapses INVALID_ARGUMENT, FAILED_PRECONDITION and RESOURCE_EXHAUSTED
# into ArrowInvalid; its message names the code ("... precondition failed
# error, with message: ..."), see docs/PROTOCOL.md.
_CODE_WORDS = [
    ("precondition failed", "FAILED_PRECONDITION", PlanError),
    ("resource exhausted", "RESOURCE_EXHAUSTED", ResourceExhaustedError),
    ("invalid argument", "INVALID_ARGUMENT", InvalidRequestError),
    ("not found", "NOT_FOUND", NotFoundError),
    ("unavailable", "UNAVAILABLE", UnavailableError),
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
    cls: type[MeshfeedError] = MeshfeedError
    code: str | None = None
    if isinstance(exc, flight.FlightUnavailableError):
        cls, code = UnavailableError, "UNAVAILABLE"
    elif isinstance(exc, flight.FlightUnauthorizedError):
        cls, code = PermissionDeniedError, "PERMISSION_DENIED"
    elif isinstance(exc, flight.FlightUnauthenticatedError):
        cls, code = PermissionDeniedError, "UNAUTHENTICATED"
    elif isinstance(exc, flight.FlightTimedOutError):
        cls, code = UnavailableError, "DEADLINE_EXCEEDED"
    elif isinstance(exc, flight.FlightCancelledError):
        cls, code = MeshfeedError, "CANCELLED"
    elif isinstance(exc, flight.FlightInternalError):
        cls, code = MeshfeedError, "INTERNAL"
    elif isinstance(exc, pa.ArrowKeyError):
        cls, code = NotFoundError, "NOT_FOUND"
    elif isinstance(exc, pa.ArrowNotImplementedError):
        cls, code = InvalidRequestError, "UNIMPLEMENTED"
    else:
        if isinstance(exc, pa.ArrowInvalid):
            cls, code = InvalidRequestError, "INVALID_ARGUMENT"
        # pyarrow collapses several codes into one exception type; the code
        # word in the server's message (docs/PROTOCOL.md) tells them apart.
        for w, c, k in _CODE_WORDS:
            if words is not None and w in words:
                cls, code = k, c
                break
    label = f" ({code})" if code else ""
    err = cls(f"meshfeed server{label}: {server_msg}", code=code, server_message=server_msg)
    err.__cause__ = exc
    return err


# Status code names (as gRPC spells them) onto the exceptions, for errors that
# arrive with their code (the shared-memory wire's error frames).
_BY_CODE: dict[str, type[MeshfeedError]] = {
    "INVALID_ARGUMENT": InvalidRequestError,
    "NOT_FOUND": NotFoundError,
    "PERMISSION_DENIED": PermissionDeniedError,
    "UNAUTHENTICATED": PermissionDeniedError,
    "FAILED_PRECONDITION": PlanError,
    "UNAVAILABLE": UnavailableError,
    "DEADLINE_EXCEEDED": UnavailableError,
    "RESOURCE_EXHAUSTED": ResourceExhaustedError,
}


def from_code(code: str | None, message: str) -> MeshfeedError:
    """Returns the meshfeed exception for a server error given by its status
    code's name (``"FAILED_PRECONDITION"``) and message."""
    cls = _BY_CODE.get(code or "", MeshfeedError)
    label = f" ({code})" if code else ""
    return cls(f"meshfeed server{label}: {message}", code=code, server_message=message)
