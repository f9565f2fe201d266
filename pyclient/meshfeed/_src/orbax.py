"""Orbax integration: the loader's position as one more item of an
``orbax.checkpoint.CheckpointManager`` checkpoint, beside the train state.

``Loader.state()`` is a small JSON dict, so it travels as Orbax's JSON item
(``ocp.args.JsonSave`` / ``ocp.args.JsonRestore``); no custom handler is needed::

    import orbax.checkpoint as ocp
    from meshfeed._src import orbax as mf_orbax

    mngr = ocp.CheckpointManager(path)
    mngr.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                            loader=mf_orbax.save_args(loader)))
    ...
    restored = mngr.restore(mngr.latest_step(),
                            args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract),
                                                    loader=mf_orbax.restore_args()))
    loader = meshfeed.Loader(..., state=mf_orbax.state_from(restored))

Save after the train state has consumed every batch the loader returned: the
saved position is the first step not yet returned by the loader (batches staged
by the prefetcher are not counted). Importing this module imports
``orbax.checkpoint``; ``import meshfeed`` does not.
"""

from __future__ import annotations

from typing import Any, Mapping

import orbax.checkpoint as ocp

from .errors import StateMismatchError

ITEM = "loader"
"""The default item name of the loader state inside a Composite checkpoint."""


def save_args(loader: Any) -> ocp.args.JsonSave:
    """The Orbax save args of ``loader.state()`` (a JSON item)."""
    return ocp.args.JsonSave(loader.state())


def restore_args() -> ocp.args.JsonRestore:
    """The Orbax restore args of a loader state saved with :func:`save_args`."""
    return ocp.args.JsonRestore()


def state_from(restored: Any, *, item: str = ITEM) -> dict[str, Any]:
    """The loader state inside the result of ``CheckpointManager.restore``:
    either the Composite result (item ``item``) or the restored JSON item
    itself. Raises StateMismatchError when it is absent or not a loader state."""
    if isinstance(restored, Mapping) and "position" in restored and "version" in restored:
        state = restored
    else:
        try:
            state = restored[item]
        except (KeyError, TypeError, AttributeError) as e:
            raise StateMismatchError(f"restored checkpoint has no loader item {item!r}: {restored!r:.200}") from e
    if not isinstance(state, Mapping) or "position" not in state or "version" not in state:
        raise StateMismatchError(f"checkpoint item {item!r} is not a meshfeed.Loader state: {state!r:.200}")
    return dict(state)


def restore_state(manager: ocp.CheckpointManager, step: int | None = None, *,
                  item: str = ITEM) -> dict[str, Any] | None:
    """Reads only the loader item of checkpoint ``step`` (the latest one if
    None) of ``manager``; None when the manager holds no checkpoint. Pass the
    result as ``state=`` to a new ``meshfeed.Loader``."""
    if step is None:
        step = manager.latest_step()
        if step is None:
            return None
    restored = manager.restore(step, args=ocp.args.Composite(**{item: restore_args()}))
    return state_from(restored, item=item)
