"""meshfeed.ray on a local multi-node Ray cluster (ray.cluster_utils.Cluster,
three nodes on 127.0.0.1): two server actors on the two nodes that carry the
custom resource "meshfeed_server", with TLS and a token; two clients, Ray
tasks on the head node, each reading six shuffled epochs from its own server
through Loader(**group.loader_kwargs(i)). One server actor is killed
mid-stream (ray.kill); Ray restarts it, its client finds the new server
through the Connection and resumes: every client sees exactly the steps of
an uninterrupted run."""

import os
import time

import numpy as np
import pytest

import meshfeed
import meshfeed.ray as mf_ray
import ray
import ray_clients
from conftest import NODE_IP, OBJECT_STORE_BYTES, gen, worker_env

ROWS, FEATURES, PAUSE_AT = 16000, 128, 5
LOCAL_DEVICES = 4


@pytest.fixture(scope="module")
def cluster(binary):
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "object_store_memory": OBJECT_STORE_BYTES, "include_dashboard": False,
        "node_ip_address": NODE_IP})
    try:
        for _ in range(2):
            c.add_node(num_cpus=1, resources={"meshfeed_server": 1}, object_store_memory=OBJECT_STORE_BYTES,
                       node_ip_address=NODE_IP)
        c.wait_for_nodes()
        ray.init(address=c.address, _node_ip_address=NODE_IP,
                 runtime_env={"env_vars": worker_env(binary, LOCAL_DEVICES)})
        try:
            yield c
        finally:
            ray.shutdown()
    finally:
        c.shutdown()


@pytest.fixture(scope="module")
def data(binary, tmp_path_factory):
    return gen(binary, tmp_path_factory.mktemp("rs") / "ds", ROWS, 3, 1000, FEATURES)


def _reference(data):
    """Every step of the same request, from one uninterrupted local Loader over 4 devices."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    sh = NamedSharding(jax.make_mesh((LOCAL_DEVICES,), ("data",), devices=jax.devices()[:LOCAL_DEVICES]), P("data"))
    with meshfeed.Loader(str(data / "*.parquet"), global_batch_size=ray_clients.B, sharding=sh,
                         columns=["id", "features"], last_batch="pad", num_epochs=ray_clients.EPOCHS,
                         shuffle=meshfeed.Shuffle(seed=ray_clients.SEED, window=ray_clients.WINDOW)) as ld:
        return [(np.asarray(b["id"]), np.asarray(b["valid"])) for b in ld]


def _same(got, want, who):
    assert len(got["ids"]) == len(want), f"{who}: {len(got['ids'])} steps, want {len(want)}"
    for s, (wi, wm) in enumerate(want):
        gi, gm = np.array(got["ids"]), np.array(got["valid"], bool)
        np.testing.assert_array_equal(gm[s], wm, err_msg=f"{who} step {s} mask")
        np.testing.assert_array_equal(gi[s][gm[s]], wi[wm], err_msg=f"{who} step {s} ids")


def _secret_files(pid: int) -> list[str]:
    """The certificate, key and token files server process pid was started
    with (its command line; the servers run on this machine here)."""
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        argv = f.read().decode().split("\0")
    flags = ("--tls-cert", "--tls-key", "--token-file")
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in flags]


def test_tls_and_token_are_required(cluster, data):
    with mf_ray.start_servers(1, allow=[str(data)], resources={"meshfeed_server": 1}) as group:
        # The key and token were on disk only while the server started: an
        # actor killed by Ray (SIGKILL) leaves neither behind.
        (pid,) = ray.get([a.pid.remote() for a in group.actors])
        files = _secret_files(pid)
        assert len(files) == 3, files
        assert not [f for f in files if os.path.exists(f)], files
        assert not os.path.exists(os.path.dirname(files[0])), files
        kw = group.loader_kwargs(0)
        (addr,) = group.addresses()
        host = addr.rsplit(":", 1)[0]
        assert host == "127.0.0.1"  # the node's IP in this local cluster
        import jax
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        sh = NamedSharding(jax.make_mesh((8,), ("data",)), P("data"))
        args = dict(global_batch_size=64, sharding=sh, columns=["id"], recovery_timeout=0)
        with meshfeed.Loader(str(data / "*.parquet"), **args, **kw) as ld:  # all three right: it plans
            assert ld.num_rows == ROWS
        with pytest.raises(meshfeed.PermissionDeniedError, match="UNAUTHENTICATED|unauthenticated"):
            meshfeed.Loader(str(data / "*.parquet"), **args, **{**kw, "token": "wrong"})
        with pytest.raises(meshfeed.MeshfeedError):  # no TLS: the handshake fails
            meshfeed.Loader(str(data / "*.parquet"), **args, server=addr, token=kw["token"])
        with pytest.raises(meshfeed.MeshfeedError):  # a certificate the server's is not signed by
            meshfeed.Loader(str(data / "*.parquet"), **args, **{**kw, "tls_root_certs": mf_ray.TLS.generate().cert_pem})


def test_server_actor_killed_mid_run_clients_recover(cluster, data, tmp_path, stop_leftover_servers):
    want = _reference(data)
    assert len(want) == ray_clients.EPOCHS * -(-ROWS // ray_clients.B)
    with mf_ray.start_servers(2, allow=[str(data)], resources={"meshfeed_server": 1}) as group:
        nodes = ray.get([a.node_id.remote() for a in group.actors])
        head = ray.get_runtime_context().get_node_id()
        assert len(set(nodes)) == 2 and head not in nodes, "want one server on each meshfeed_server node"
        pids = ray.get([a.pid.remote() for a in group.actors])
        addresses = group.addresses()

        client = ray.remote(ray_clients.read_all).options(num_cpus=1, max_retries=0)
        progress = [tmp_path / f"progress{i}" for i in range(2)]
        gate = tmp_path / "gate"
        tasks = [client.remote(str(data / "*.parquet"), group.loader_kwargs(i), PAUSE_AT, str(progress[i]), str(gate))
                 for i in range(2)]
        deadline = time.monotonic() + 120
        while not all(p.exists() for p in progress):
            assert time.monotonic() < deadline, "the clients did not reach the pause"
            ready, _ = ray.wait(tasks, timeout=0.1)
            if ready:
                ray.get(ready)  # a client failed: raise its error
        # Both clients are mid-stream (step PAUSE_AT of 378): kill server 0's actor.
        ray.kill(group.actors[0], no_restart=False)  # returns at once: the old actor may still answer a call
        new_pid = pids[0]
        deadline = time.monotonic() + 120
        while new_pid == pids[0]:
            assert time.monotonic() < deadline, "Ray did not restart the server actor"
            time.sleep(0.2)
            try:
                new_pid = ray.get(group.actors[0].pid.remote(), timeout=10)
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                pass
        new_addr = group.connection(0)()
        assert not [f for f in _secret_files(new_pid) if os.path.exists(f)]  # the restarted actor's too
        with pytest.raises(ProcessLookupError):  # the old server died with its actor (same machine here)
            for _ in range(50):
                os.kill(pids[0], 0)
                time.sleep(0.1)
        gate.touch()
        got = ray.get(tasks, timeout=300)

        for i, g in enumerate(got):
            _same(g, want, f"client {i}")
            assert g["node"] == head
        assert got[0]["before"] == addresses[0] and got[0]["after"] == new_addr
        assert got[0]["stats"]["recoveries"] >= 1, got[0]["stats"]
        assert got[1]["stats"]["recoveries"] == 0 and got[1]["after"] == addresses[1], got[1]["stats"]
        assert ray.get(group.actors[1].pid.remote()) == pids[1]  # the other server was not touched
