"""Disaggregated loading on Ray: meshfeed servers as Ray actors on CPU nodes.

``import meshfeed.ray`` does not import Ray; the functions do, when called.

    import meshfeed.ray as mf_ray
    servers = mf_ray.start_servers(4, allow=["gs://bucket"], resources={"meshfeed_server": 1})
    trainer = JaxTrainer(train_loop, train_loop_config={
        "loader_kwargs": [servers.loader_kwargs(r) for r in range(num_workers)], ...})
    # in the train loop, on worker `rank`:
    loader = meshfeed.Loader(..., **config["loader_kwargs"][rank])

Each server actor runs ``meshfeed serve`` on its node's IP with TLS and a
bearer token; ``loader_kwargs(i)`` names server ``i % n`` through a
:class:`Connection`, a callable the Loader asks for the current address
before every reconnect. A killed actor is restarted by Ray (``max_restarts``)
with a new server, possibly on another node or port, and the clients'
recovery finds it there and resumes at the first step they have not received.
See examples/README.md ("Where the servers run") for when to use this rather
than one server per training host.
"""

from meshfeed._src.rayservers import (DEFAULT_SERVER_ARGS, SERVER_NAME, TLS, Connection, ServerGroup, ServerProcess,
                                      start_servers)

__all__ = ["DEFAULT_SERVER_ARGS", "SERVER_NAME", "TLS", "Connection", "ServerGroup", "ServerProcess",
           "start_servers"]
