"""meshfeed: feed JAX from Parquet over Arrow Flight.

A Go service reads Parquet from disk or GCS, cuts every global batch into the
slices the devices of a mesh need, and streams them over Arrow Flight; this
package turns them into sharded ``jax.Array``s without host copies::

    loader = meshfeed.Loader("/data/train/*.parquet", global_batch_size=1024,
                             sharding=NamedSharding(mesh, P("data")))
    for batch in loader:
        ...
"""

from ._src.config import Column, Shuffle
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
from ._version import __version__

for _obj in (Column, Shuffle, Loader, BinaryNotFoundError, InvalidRequestError, MeshfeedError, NotFoundError,
             PermissionDeniedError, PlanError, ResourceExhaustedError, StateMismatchError, UnavailableError):
    _obj.__module__ = __name__  # public names print as meshfeed.X
del _obj

__all__ = [
    "BinaryNotFoundError",
    "Column",
    "InvalidRequestError",
    "Loader",
    "MeshfeedError",
    "NotFoundError",
    "PermissionDeniedError",
    "PlanError",
    "ResourceExhaustedError",
    "Shuffle",
    "StateMismatchError",
    "UnavailableError",
]
