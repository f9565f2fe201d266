"""Elastic resume: a Loader state saved under data-parallel degree D resumed
under another degree D' (docs/CONTRACT-elastic.md).

The rest of the epoch the state was saved in is delivered re-split over D'
slices (same global batch size, same number of steps), then the plain plan
with D' runs from the next epoch on. The server does the re-splitting; the
client only names the switch in its ticket (the ``elastic`` field) for as long
as it reads that epoch, and records it in ``state()``.
"""

from __future__ import annotations

from typing import Any, Mapping

from .errors import StateMismatchError

# Fingerprint keys that may differ between the saved state and the loader when
# elastic resume is allowed. steps_per_epoch does not change with D.
_ELASTIC_KEYS = {"num_slices"}


def fingerprint_diffs(mine: Mapping[str, Any], theirs: Mapping[str, Any]) -> list[str]:
    """The fingerprint keys whose values differ, sorted."""
    return [k for k in sorted(set(mine) | set(theirs)) if theirs.get(k) != mine.get(k)]


def resolve_switch(state: Mapping[str, Any], mine: Mapping[str, Any], pos: tuple[int, int],
                   allow: bool, mixture: bool = False) -> dict[str, int] | None:
    """The elastic switch a resumed loader must name in its tickets, or None.

    ``mine`` is this loader's fingerprint (through JSON), ``pos`` the saved
    position. Raises StateMismatchError when the fingerprints differ in more
    than D, when only D differs and ``allow`` is false, or when a state saved
    inside the epoch of an earlier switch is resumed with yet another D before
    that epoch ended. For a ``mixture`` (one pass: its switch's epoch never
    ends) the steps are not compared here: the server plans them with the
    switch (the Loader compares them after)."""
    theirs = state["fingerprint"]
    if mixture:
        mine = {k: v for k, v in mine.items() if k != "steps_per_epoch"}
        theirs = {k: v for k, v in theirs.items() if k != "steps_per_epoch"}
    diffs = fingerprint_diffs(mine, theirs)
    prior = state.get("elastic")
    if prior is not None:
        try:
            prior = {"from_slices": int(prior["from_slices"]), "epoch": int(prior["epoch"]), "step": int(prior["step"])}
        except (KeyError, TypeError, ValueError) as e:
            raise StateMismatchError(f"state elastic {state.get('elastic')!r}: {e}") from e
        if prior["epoch"] != pos[0]:
            prior = None  # that epoch is over: the state is a plain one under its D
    if not diffs:
        return prior
    lines = [f"{k}: state has {theirs.get(k)!r}, this loader has {mine.get(k)!r}" for k in diffs]
    if set(diffs) - _ELASTIC_KEYS:
        raise StateMismatchError("state comes from another configuration:\n  " + "\n  ".join(lines))
    if not allow:
        raise StateMismatchError(
            "state comes from another data-parallel degree:\n  " + "\n  ".join(lines) +
            "\npass elastic=True to resume it with this sharding: the rest of the epoch is delivered "
            "re-split over the new slices, each row once (docs/CONTRACT-elastic.md)")
    if prior is not None and mixture:
        raise StateMismatchError(
            f"state was saved at step {pos[1]} of a mixture after its elastic switch from num_slices "
            f"{prior['from_slices']} to {theirs.get('num_slices')} at step {prior['step']}: a mixture changes its "
            f"data-parallel degree once; resume this state with num_slices {theirs.get('num_slices')}")
    if prior is not None:
        raise StateMismatchError(
            f"state was saved at epoch {pos[0]} step {pos[1]}, inside the epoch of an elastic switch from "
            f"num_slices {prior['from_slices']} to {theirs.get('num_slices')}: until that epoch ends it resumes "
            f"only with num_slices {theirs.get('num_slices')}; save again at an epoch boundary to change it")
    if pos[1] == 0:
        return None  # at an epoch boundary the plain plan with D' starts
    return {"from_slices": int(theirs["num_slices"]), "epoch": pos[0], "step": pos[1]}
