"""Client side of test_ray_servers.py, run in Ray workers (imported by
reference through PYTHONPATH): a Loader over this process's CPU devices,
connected to a meshfeed.ray server, reading every step of six epochs."""

import os
import time

B, SEED, WINDOW, EPOCHS = 256, 11, 512, 6  # 6 x 8 MB: more than gRPC can buffer ahead


def read_all(data, loader_kwargs, pause_at=None, progress=None, gate=None, gate_timeout=120.0):
    """Reads every step; after step ``pause_at`` creates ``progress`` and
    waits for ``gate`` (so the test can kill a server while the stream is
    open). Returns the ids and masks per step, the loader's stats and its
    server address before and after."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import meshfeed

    sh = NamedSharding(jax.make_mesh((jax.local_device_count(),), ("data",)), P("data"))
    ids, valid = [], []
    with meshfeed.Loader(data, global_batch_size=B, sharding=sh, columns=["id", "features"], last_batch="pad",
                         shuffle=meshfeed.Shuffle(seed=SEED, window=WINDOW), num_epochs=EPOCHS, prefetch=1,
                         recovery_timeout=120, **loader_kwargs) as ld:
        before = ld.address
        for i, batch in enumerate(ld):
            ids.append(np.asarray(batch["id"]).tolist())
            valid.append(np.asarray(batch["valid"]).tolist())
            if i == pause_at:
                open(progress, "w").close()
                deadline = time.monotonic() + gate_timeout
                while not os.path.exists(gate):
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"the test did not open {gate}")
                    time.sleep(0.05)
        return {"ids": ids, "valid": valid, "stats": ld.stats(), "before": before, "after": ld.address,
                "node": __import__("ray").get_runtime_context().get_node_id()}
