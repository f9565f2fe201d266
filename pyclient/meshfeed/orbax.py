"""Orbax integration: save and restore a Loader's position beside the train state.

``import meshfeed.orbax`` imports orbax-checkpoint; ``import meshfeed`` does not.

    import orbax.checkpoint as ocp, meshfeed.orbax as mf_orbax
    mngr.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                            loader=mf_orbax.save_args(loader)))
    saved = mf_orbax.restore_state(mngr)          # None when there is no checkpoint
    loader = meshfeed.Loader(..., state=saved)
"""

from meshfeed._src.orbax import restore_args, restore_state, save_args, state_from

__all__ = ["restore_args", "restore_state", "save_args", "state_from"]
