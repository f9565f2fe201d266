"""Client-side bad input: each is refused with an error naming the culprit,
before or without disturbing the server (which keeps serving)."""

import jax
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import meshfeed


def _sh(spec):
    return NamedSharding(jax.make_mesh((4, 2), ("data", "model")), spec)


def test_unknown_mesh_axis(server, glob):
    # JAX refuses the sharding itself, naming the axis; meshfeed never sees it.
    with pytest.raises(ValueError, match="nope"):
        meshfeed.Loader(glob, global_batch_size=64, sharding=_sh(P("nope")), server=server.address)


def test_batch_not_divisible_by_slices(server, glob):
    with pytest.raises(meshfeed.InvalidRequestError, match="12"):
        meshfeed.Loader(glob, global_batch_size=12, sharding=_sh(P(("data", "model"))),
                        server=server.address)


def test_bad_recovery_timeout(server, glob):
    with pytest.raises(meshfeed.InvalidRequestError, match="recovery_timeout=-1"):
        meshfeed.Loader(glob, global_batch_size=64, sharding=_sh(P("data")), server=server.address,
                        recovery_timeout=-1)


def test_server_keeps_serving_after_bad_input(server, glob):
    with pytest.raises(meshfeed.PlanError):
        meshfeed.Loader(glob, global_batch_size=64, sharding=_sh(P("data")), server=server.address,
                        last_batch="raise")
    with meshfeed.Loader(glob, global_batch_size=64, sharding=_sh(P("data")), server=server.address) as ld:
        assert sum(1 for _ in ld) == ld.steps_per_epoch
