"""meshfeed._src.orbax: the loader position saved and restored beside the train
state by an orbax.checkpoint.CheckpointManager; resuming equals not stopping."""

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import meshfeed
from meshfeed._src import orbax as mf_orbax

B, TOTAL, STOP = 64, 24, 9  # 16 steps per epoch (pad): the run crosses an epoch boundary


def make_loader(server, glob, mesh, state=None):
    return meshfeed.Loader(glob, global_batch_size=B, sharding=NamedSharding(mesh, P("data")),
                           columns=["id", "features"], last_batch="pad", num_epochs=None,
                           shuffle=meshfeed.Shuffle(seed=7, window=300), server=server.address, state=state)


@jax.jit
def train_step(params, batch):
    x = batch["features"]
    m = batch["valid"].astype(x.dtype)
    y = jnp.sum(x[:, :2], axis=1)  # a target the linear model can fit

    def loss(p):
        err = (x @ p["w"] + p["b"] - y) * m
        return jnp.sum(err * err) / jnp.maximum(jnp.sum(m), 1.0)

    g = jax.grad(loss)(params)
    return jax.tree.map(lambda p, gp: p - 0.1 * gp, params, g)


def init_params(mesh, features):
    rep = NamedSharding(mesh, P())
    return {"w": jax.device_put(jnp.zeros((features,), jnp.float32), rep),
            "b": jax.device_put(jnp.zeros((), jnp.float32), rep)}


def run(loader, params, steps, seen):
    for _, batch in zip(range(steps), loader):
        seen.append(np.asarray(batch["id"]).copy())
        params = train_step(params, batch)
    return params


def test_checkpoint_manager_round_trip_resumes_exactly(server, glob, tmp_path):
    mesh = jax.make_mesh((4, 2), ("data", "model"))

    want_ids = []
    with make_loader(server, glob, mesh) as ld:
        assert ld.steps_per_epoch == 16
        want_params = run(ld, init_params(mesh, 8), TOTAL, want_ids)

    got_ids = []
    with make_loader(server, glob, mesh) as ld:
        params = run(ld, init_params(mesh, 8), STOP, got_ids)
        with ocp.CheckpointManager(tmp_path / "ckpt") as mngr:
            assert mf_orbax.restore_state(mngr) is None  # nothing saved yet
            mngr.save(STOP, args=ocp.args.Composite(state=ocp.args.StandardSave(params),
                                                    loader=mf_orbax.save_args(ld)))
            mngr.wait_until_finished()
        saved_position = ld.state()["position"]
    assert saved_position == {"epoch": 0, "step": STOP}
    del params  # the continuation may only use what the checkpoint holds

    with ocp.CheckpointManager(tmp_path / "ckpt") as mngr:
        assert mngr.latest_step() == STOP
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, init_params(mesh, 8))
        restored = mngr.restore(STOP, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract),
                                                             loader=mf_orbax.restore_args()))
        only_loader = mf_orbax.restore_state(mngr)  # the loader item alone, latest step
    state = mf_orbax.state_from(restored)
    assert state == only_loader
    assert state["position"] == saved_position
    params = restored["state"]
    assert params["w"].sharding.is_equivalent_to(NamedSharding(mesh, P()), 1)
    with make_loader(server, glob, mesh, state=state) as ld:
        params = run(ld, params, TOTAL - STOP, got_ids)

    assert len(got_ids) == len(want_ids) == TOTAL
    for s, (got, want) in enumerate(zip(got_ids, want_ids)):
        np.testing.assert_array_equal(got, want, err_msg=f"step {s} ids")
    # shuffled, and epoch 1 is another permutation: equality above is not vacuous
    assert not np.array_equal(want_ids[0], np.arange(B))
    assert not np.array_equal(want_ids[0], want_ids[16])
    for k in ("w", "b"):
        np.testing.assert_array_equal(np.asarray(params[k]), np.asarray(want_params[k]), err_msg=k)
    assert np.abs(np.asarray(want_params["w"])).sum() > 0  # training moved the params


def test_state_from_rejects_other_items():
    with pytest.raises(meshfeed.StateMismatchError, match="no loader item 'loader'"):
        mf_orbax.state_from({"state": {}})
    with pytest.raises(meshfeed.StateMismatchError, match="not a meshfeed.Loader state"):
        mf_orbax.state_from({"loader": {"step": 3}})
    ok = {"version": 1, "position": {"epoch": 0, "step": 1}, "fingerprint": {}}
    assert mf_orbax.state_from({"loader": ok}) == ok
    assert mf_orbax.state_from(ok) == ok


def test_import_meshfeed_does_not_import_orbax():
    import subprocess
    import sys
    code = "import sys, meshfeed; sys.exit(1 if any(m.startswith('orbax') for m in sys.modules) else 0)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0, "import meshfeed imported orbax"
