"""meshfeed: feed JAX from Parquet over Arrow Flight.

A Go service reads Parquet from disk or GCS, cuts every global batch into the
slices the devices of a mesh need, and streams them over Arrow Flight; this
package turns them into sharded ``jax.Array``s without host copies::

    loader = meshfeed.Loader("/data/train/*.parquet", global_batch_size=1024,
                             sharding=NamedSharding(mesh, P("data")))
    for batch in loader:
        ...

The configuration is typed and frozen: ``Loader``'s keyword arguments make a
``LoaderConfig`` (``Shuffle``, ``Column`` and ``ServerOptions`` inside it),
``last_batch`` is a ``LastBatch`` and ``transport`` a ``Transport`` literal.
"""

from ._src.config import Column, LastBatch, LoaderConfig, ServerOptions, Shuffle, Transport
from ._src.errors import (
    BinaryNotFoundError,
    InvalidRequestError,
    MeshfeedError,
    NotFoundError,
    PermissionDeniedError,
    PlanError,
    ResourceExhaustedError,
    StateMismatchError,
    UnavailableError,
)
from ._src.loader import Loader
from ._src.mixture import Mixture, Source, StopRule
from ._src.transform import TransformError
from ._src.server import LOCAL_MEMORY_BUDGET, LOCAL_READ_AHEAD
from ._version import __version__

for _obj in (Mixture, Source, Column, LoaderConfig, ServerOptions, Shuffle, Loader, BinaryNotFoundError, InvalidRequestError, MeshfeedError, NotFoundError,
             PermissionDeniedError, PlanError, ResourceExhaustedError, StateMismatchError, TransformError,
             UnavailableError):
    _obj.__module__ = __name__  # public names print as meshfeed.X
del _obj

__all__ = [
    "LOCAL_MEMORY_BUDGET",
    "LOCAL_READ_AHEAD",
    "BinaryNotFoundError",
    "Column",
    "InvalidRequestError",
    "LastBatch",
    "Loader",
    "LoaderConfig",
    "MeshfeedError",
    "Mixture",
    "NotFoundError",
    "PermissionDeniedError",
    "PlanError",
    "ResourceExhaustedError",
    "ServerOptions",
    "Shuffle",
    "Source",
    "StateMismatchError",
    "TransformError",
    "StopRule",
    "Transport",
    "UnavailableError",
]
