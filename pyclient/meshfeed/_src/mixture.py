"""Weighted mixtures of datasets (docs/DESIGN.md, "Mixtures").

A :class:`Mixture` of :class:`Source` s is accepted wherever a Loader takes
``data``. The server plans it (the composition of every step, the stop rule,
every source's positions) from footers alone; the client only describes it in
the ticket's ``mixture`` field (docs/PROTOCOL.md) and carries, across
resumes with ``reweight=True``, the history of the weights.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Literal, Mapping, Sequence, get_args

from .errors import InvalidRequestError, MeshfeedError, StateMismatchError

StopRule = Literal["first_exhausted", "all_exhausted"]
"""When a mixture ends, besides a number of steps: at the first step in which
some source would need rows past its first epoch (``"first_exhausted"``), or
once every source has delivered its whole first epoch (``"all_exhausted"``)."""

_RULES: tuple[str, ...] = get_args(StopRule)


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Span:
    from_step: int
    weights: tuple[float, ...]
    positions: tuple[int, ...] | None = None  # C_i(from_step) per slice, by source


@dataclasses.dataclass(frozen=True)
class Source:
    """One source of a :class:`Mixture`: a dataset, its weight, and how it
    is read (its own columns, rename map and shuffle).

    Args:
        data: dataset URI, glob, or a list of them.
        weight: the source's weight, a finite number >= 0 (weights need not
            sum to 1; at least one source's is > 0).
        columns: None (all columns), a list of names or ``{name: Column or
            None}``, named as in the source's files.
        rename: ``{name in the files: name in the batch}``, applied after
            selection: every source must deliver the same columns, dtypes and
            shapes after it (checked by the server when the loader is built).
        shuffle: a :class:`meshfeed.Shuffle` for this source, or None for file
            order. Its seed seeds the source's permutations; None derives one
            from the mixture's seed and the source's URIs.
        filters: keep only this source's rows that match, in
            pyarrow.parquet's form (as the Loader's ``filters``), on the
            column names of the source's files (before ``rename``; the
            columns need not be among those delivered). The source's rows,
            its epochs and its share of the steps are its kept rows. A filter
            is part of the source's identity: a state saved with another
            filter does not resume (with ``reweight=True`` it is another
            source).
    """

    data: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
    weight: float = 1.0
    columns: Sequence[str] | Mapping[str, Any] | None = None
    rename: Mapping[str, str] | None = None
    shuffle: Any = None
    filters: Sequence[Any] | None = None

    def __post_init__(self) -> None:
        from .config import Shuffle, _normalize_uri, _wire_columns
        from .filters import wire_filters
        problems: list[str] = []
        bad = problems.append
        w = self.weight
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
            bad(f"weight={w!r}: want a finite number >= 0")
        uris = [self.data] if isinstance(self.data, (str, os.PathLike)) else list(self.data) \
            if isinstance(self.data, Sequence) else None
        datasets: list[str] = []
        if not uris:
            bad(f"data={self.data!r}: want a dataset URI or a list of them")
        for u in uris or ():
            norm, problem = _normalize_uri(u)
            if problem or norm is None:
                bad(problem or f"data URI {u!r}")
            else:
                datasets.append(norm)
        if self.shuffle is not None and not isinstance(self.shuffle, Shuffle):
            bad(f"shuffle={self.shuffle!r}: want a meshfeed.Shuffle or None")
        ren = dict(self.rename or {})
        if not all(isinstance(k, str) and k and isinstance(v, str) and v for k, v in ren.items()):
            bad(f"rename={self.rename!r}: want {{name: new name}} of non-empty strings")
        elif len(set(ren.values())) != len(ren):
            bad(f"rename={self.rename!r}: two columns get the same name")
        cols = _wire_columns(self.columns, bad)
        filt = wire_filters(self.filters, bad)
        if problems:
            raise InvalidRequestError("meshfeed.Source: " + "; ".join(problems))
        object.__setattr__(self, "_filters", filt)
        object.__setattr__(self, "weight", float(w))
        object.__setattr__(self, "_datasets", tuple(datasets))
        object.__setattr__(self, "_columns", cols)
        object.__setattr__(self, "rename", ren or None)

    def identity(self) -> dict[str, Any]:
        """What makes this source the same source in a resumed run: its URIs,
        columns, rename map, shuffle and filters (not its weight)."""
        out: dict[str, Any] = {"datasets": list(self._datasets)}  # type: ignore[attr-defined]
        if self._columns is not None:  # type: ignore[attr-defined]
            out["columns"] = [dict(c) for c in self._columns]  # type: ignore[attr-defined]
        if self.rename:
            out["rename"] = dict(sorted(self.rename.items()))
        if self.shuffle is not None:
            out["shuffle"] = {"enabled": True, "window": self.shuffle.window}
            out["seed"] = self.shuffle.seed
        if self._filters is not None:  # type: ignore[attr-defined]
            out["filters"] = [[dict(t) for t in conj] for conj in self._filters]  # type: ignore[attr-defined]
        return out

    def to_wire(self, outputs: Sequence[tuple[str, str | None]] | None) -> dict[str, Any]:
        """The ticket's source object. ``outputs`` (None: as configured) are
        the batch's columns by output name, each with the dtype the server
        narrows it to (64-bit columns without x64) or None."""
        out = self.identity()
        out["weight"] = self.weight
        if outputs is not None:
            ren = self.rename or {}
            inv = {v: k for k, v in ren.items()}
            narrow = {n: d for n, d in outputs if d is not None}
            cols = out.get("columns") or [{"name": inv.get(n, n)} for n, _ in outputs]
            for c in cols:
                to = narrow.get(ren.get(c["name"], c["name"]))
                if to is not None and c.get("dtype") is None:
                    c["dtype"] = to
            out["columns"] = cols
        return out


@dataclasses.dataclass(frozen=True)
class Mixture:
    """A weighted mixture of datasets, accepted wherever a Loader takes
    ``data``. Every step holds rows of every source, on every slice, in the
    proportions of the weights (within one row per slice, cumulatively), the
    counts fixed by the weights and the step alone; a source that runs out
    starts its next epoch with its own reshuffle (docs/DESIGN.md, "Mixtures").

    Args:
        sources: the :class:`Source` s, at least one.
        stop: when the mixture ends: an int number of steps, ``"first_exhausted"``
            or ``"all_exhausted"``. Every process knows the steps at
            construction (``loader.steps_per_epoch``, from the server's plan).
        source_column: when set, each batch gets an int32 array of that name
            holding each row's source index (-1 on padding rows). When the
            sources pack (the same ``Column(..., length=L, pack_ratio=r)`` in
            every source), it is per token instead, shaped like the packed
            tokens (``(B', L)``, -1 on padding tokens), for per-source loss
            weights.
        seed: seeds the order of the sources' rows inside each slice and the
            sources without a shuffle seed of their own.

    With packing, each step's composed rows (the weights count documents)
    are packed first-fit into ``ceil(b / r)`` rows a slice, as one dataset's
    slice; ``pack="concat"`` is refused (it counts tokens).

    A mixture is one pass (``num_epochs=1``). ``Loader(state=...,
    reweight=True)`` resumes a state with changed weights, or sources added
    or removed: sources continue from their saved positions and the new
    weights apply from the resume step on. ``elastic=True`` resumes a state
    on a mesh of another data-parallel degree (docs/CONTRACT-elastic.md,
    "Mixtures").
    """

    sources: Sequence[Source]
    stop: int | StopRule = "first_exhausted"
    source_column: str | None = None
    seed: int = 0
    history: tuple[_Span, ...] = dataclasses.field(default=(), repr=False)
    weights_from: int = dataclasses.field(default=0, repr=False)
    weights_from_positions: tuple[int, ...] | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self) -> None:
        problems: list[str] = []
        srcs = list(self.sources) if isinstance(self.sources, Sequence) else None
        if not srcs:
            problems.append(f"sources={self.sources!r}: want a non-empty list of meshfeed.Source")
        elif not all(isinstance(s, Source) for s in srcs):
            problems.append(f"sources: want meshfeed.Source items, got {[type(s).__name__ for s in srcs]}")
        elif all(s.weight == 0 for s in srcs):
            problems.append("every source's weight is 0: give at least one a positive weight")
        st = self.stop
        if isinstance(st, bool) or not (isinstance(st, int) and st > 0 or st in _RULES):
            problems.append(f"stop={st!r}: want an int number of steps > 0, 'first_exhausted' or 'all_exhausted'")
        if self.source_column is not None and (not isinstance(self.source_column, str) or not self.source_column):
            problems.append(f"source_column={self.source_column!r}: want a name or None")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 1 << 64:
            problems.append(f"seed={self.seed!r}: want an int in [0, 2**64)")
        if problems:
            raise InvalidRequestError("meshfeed.Mixture: " + "; ".join(problems))
        object.__setattr__(self, "sources", tuple(srcs or ()))

    def to_wire(self, outputs: Sequence[tuple[str, str | None]] | None = None) -> dict[str, Any]:
        """The ticket's ``mixture`` object (docs/PROTOCOL.md); ``outputs`` as
        for :meth:`Source.to_wire`."""
        stop = {"rule": "num_steps", "num_steps": self.stop} if isinstance(self.stop, int) else {"rule": self.stop}
        out: dict[str, Any] = {"sources": [s.to_wire(outputs) for s in self.sources], "stop": stop}
        if self.source_column:
            out["source_column"] = self.source_column
        if self.history:
            out["history"] = [{"from_step": h.from_step, "weights": list(h.weights)} for h in self.history]
            for h, o in zip(self.history, out["history"]):
                if h.positions is not None:
                    o["positions"] = list(h.positions)
            out["weights_from"] = self.weights_from
            if self.weights_from_positions is not None:
                out["weights_from_positions"] = list(self.weights_from_positions)
        return out

    def reweighted(self, saved: Mapping[str, Any], step: int,
                   tokenizers: Sequence[Mapping[str, str]] | None = None,
                   positions: Sequence[int] | None = None,
                   switch: tuple[int, int, int] | None = None) -> "Mixture":
        """This mixture resuming a run whose ticket's mixture was ``saved``
        (from a state's fingerprint) at ``step``: the saved weight history,
        mapped onto these sources by identity (a source added now had weight
        0 before, a removed one is gone), then these weights from ``step``.
        ``tokenizers`` (per source, column name to SHA-256, as the server
        plans them) name a tokenized column's tokenizer by content, as the
        fingerprint does: a tokenizer.json moved is the same source, another
        one another source.

        ``positions`` (the state's, per saved source) are the sources'
        positions at ``step``: the span from ``step`` carries them (0 for a
        source added now), and so does every span of the saved history
        that did, so that the server never recomputes the spans before
        (a removed source changed them; docs/DESIGN.md, "Weights over
        time"). ``switch`` ``(rows per slice before, after, step)`` names the
        saved run's elastic switch: when it lies before ``step`` a span with
        its positions (walked on the saved mixture) starts there too."""
        try:
            old_ids = [_identity_of(s) for s in saved["sources"]]
            old_spans = _wire_spans(saved)
        except (KeyError, TypeError, ValueError) as e:
            raise StateMismatchError(f"state's mixture {saved!r} is malformed: {e}") from e
        if switch is not None and 0 < switch[2] < step and not any(f == switch[2] for f, _, _ in old_spans):
            at = Positions.of_spans(old_spans, len(old_ids), switch[1], switch[:1] + switch[2:]).at(switch[2])
            j = max(j for j, (f, _, _) in enumerate(old_spans) if f < switch[2])
            old_spans.insert(j + 1, (switch[2], old_spans[j][1], at))
        sums = list(tokenizers or [])
        mine = [_identity_of(_hashed(s.identity(), sums[i] if i < len(sums) else {}))
                for i, s in enumerate(self.sources)]
        spans: list[_Span] = []
        for frm, ws, pos in old_spans:
            if frm >= step:
                break
            by_id = dict(zip(old_ids, ws))
            at_id = None if pos is None else dict(zip(old_ids, pos))
            spans.append(_Span(from_step=frm, weights=tuple(by_id.get(i, 0.0) for i in mine),
                               positions=None if at_id is None else tuple(at_id.get(i, 0) for i in mine)))
        if not spans:
            return self
        if all(w == 0 for w in spans[0].weights) and len(spans) == 1:
            raise StateMismatchError("reweight: none of this mixture's sources was in the saved mixture; "
                                     "start a new run instead of resuming this state")
        now = None
        if positions is not None:
            if len(positions) != len(old_ids):
                raise StateMismatchError(f"state's mixture positions {list(positions)!r}: want one per source "
                                         f"of its mixture ({len(old_ids)})")
            at_id = dict(zip(old_ids, (int(p) for p in positions)))
            now = tuple(at_id.get(i, 0) for i in mine)
        return dataclasses.replace(self, history=tuple(spans), weights_from=step, weights_from_positions=now)


def _wire_spans(mix: Mapping[str, Any]) -> list[tuple[int, list[float], list[int] | None]]:
    """A ticket mixture's weight spans: (from step, weights, positions or None)."""
    def pos(p: Any) -> list[int] | None:
        return None if p is None else [int(v) for v in p]
    out = [(int(h["from_step"]), [float(w) for w in h["weights"]], pos(h.get("positions")))
           for h in mix.get("history", [])]
    out.append((int(mix.get("weights_from", 0)), [float(s["weight"]) for s in mix["sources"]],
                pos(mix.get("weights_from_positions"))))
    return out


def _hashed(identity: dict[str, Any], sums: Mapping[str, str]) -> dict[str, Any]:
    """A source's identity with its tokenizers named by hash (config.hashed_columns)."""
    if "columns" not in identity:
        return identity
    from .config import hashed_columns
    return dict(identity, columns=hashed_columns(identity["columns"], sums))


def _identity_of(wire_source: Mapping[str, Any]) -> str:
    import json
    return json.dumps({k: v for k, v in wire_source.items() if k != "weight"}, sort_keys=True)


def mixture_diffs(mine: Mapping[str, Any], theirs: Mapping[str, Any]) -> list[str]:
    """What differs between two tickets' mixtures, source by source."""
    out: list[str] = []
    ms, ts = mine.get("sources", []), theirs.get("sources", [])
    if len(ms) != len(ts):
        out.append(f"the state's mixture has {len(ts)} sources, this loader's {len(ms)}")
    for i, (a, b) in enumerate(zip(ms, ts)):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                out.append(f"source {i} {k}: state has {b.get(k)!r}, this loader has {a.get(k)!r}")
    for k in ("stop", "source_column", "history", "weights_from", "weights_from_positions"):
        if mine.get(k) != theirs.get(k):
            out.append(f"{k}: state has {theirs.get(k)!r}, this loader has {mine.get(k)!r}")
    return out


def resume_config(cfg: Any, state: Mapping[str, Any], reweight: bool,
                  tokenizers: Sequence[Mapping[str, str]] | None = None) -> Any:
    """The LoaderConfig a mixture loader resumes ``state`` with: ``cfg``
    itself, or with ``reweight`` the mixture carrying the saved weight
    history (:meth:`Mixture.reweighted`, given the sources' ``tokenizers``
    hashes). The fingerprints are compared afterwards
    (:func:`check_fingerprints`)."""
    fp = state.get("fingerprint") if isinstance(state, Mapping) else None
    saved = fp.get("mixture") if isinstance(fp, Mapping) else None
    if not isinstance(saved, Mapping):
        raise StateMismatchError("state comes from a loader of a plain dataset, this loader reads a meshfeed.Mixture")
    if not reweight:
        return cfg
    try:
        step = int(state["position"]["step"])
        rec = state.get("mixture")
        positions = None
        if isinstance(rec, Mapping) and rec.get("positions") is not None and int(rec.get("step", -1)) == step:
            positions = [int(p) for p in rec["positions"]]
        sw, switch = state.get("elastic"), None
        if isinstance(sw, Mapping) and int(sw.get("epoch", 0)) == 0:
            B = int(cfg.global_batch_size)
            switch = (B // int(sw["from_slices"]), B // int(state["fingerprint"]["num_slices"]), int(sw["step"]))
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
        raise StateMismatchError(f"state position {state.get('position')!r}, mixture {state.get('mixture')!r} "
                                 f"or elastic {state.get('elastic')!r}: {e}") from e
    return dataclasses.replace(cfg, data=cfg.mixture.reweighted(saved, step, tokenizers, positions, switch))


def check_fingerprints(mine: dict[str, Any], theirs: Mapping[str, Any], reweight: bool) -> tuple[dict, dict]:
    """Compares a mixture loader's fingerprint with a state's: without
    ``reweight`` a different mixture is refused, naming what changed; with
    it, the mixture (and so the steps and rows) may differ. Returns both
    without the keys left to the general comparison."""
    if theirs.get("mixture") != mine.get("mixture") and not reweight:
        if (msg := _tokenizer_diffs(mine.get("mixture") or {}, theirs.get("mixture") or {})) is not None:
            raise StateMismatchError(msg)
        lines = mixture_diffs(mine.get("mixture") or {}, theirs.get("mixture") or {})
        raise StateMismatchError(
            "state comes from another mixture:\n  " + "\n  ".join(lines) +
            "\npass reweight=True to resume it with these weights (or sources): each source continues from its "
            "saved position and the new weights apply from the saved step on")
    skip = {"mixture", "steps_per_epoch", "num_rows"} if reweight else set()
    return ({k: v for k, v in mine.items() if k not in skip}, {k: v for k, v in theirs.items() if k not in skip})


def _without_hashes(mix: Mapping[str, Any]) -> Any:
    return [[{k: v for k, v in c.items() if k != "tokenizer_sha256"} for c in s.get("columns") or []]
            + [{k: v for k, v in s.items() if k != "columns"}] for s in mix.get("sources") or []]


def _tokenizer_diffs(mine: Mapping[str, Any], theirs: Mapping[str, Any]) -> str | None:
    """When two mixtures differ only in tokenizers (fingerprints name them
    by SHA-256): a message naming each changed column with both hashes."""
    rest = ("stop", "source_column", "history", "weights_from", "weights_from_positions")
    if _without_hashes(mine) != _without_hashes(theirs) or any(mine.get(k) != theirs.get(k) for k in rest):
        return None
    lines = []
    for i, (a, b) in enumerate(zip(theirs.get("sources") or [], mine.get("sources") or [])):
        for ca, cb in zip(a.get("columns") or [], b.get("columns") or []):
            if ca.get("tokenizer_sha256") != cb.get("tokenizer_sha256"):
                lines.append(f"source {i} column {cb.get('name')!r}: the state was saved with tokenizer sha256 "
                             f"{ca.get('tokenizer_sha256')}, this loader's has sha256 {cb.get('tokenizer_sha256')}")
    if not lines:
        return None
    return ("state comes from another tokenizer:\n  " + "\n  ".join(lines) +
            "\nresume with the tokenizer.json files the state was saved with (their ids differ), or pass "
            "reweight=True to read such a source as a new one (from its start, weight 0 before)")


def mixture_from_spec(spec: Mapping[str, Any]) -> Mixture:
    """A :class:`Mixture` from its JSON form (``python -m meshfeed bench
    --mixture``)::

        {"sources": [{"data": "/data/web/*.parquet", "weight": 0.7,
                      "columns": {"text": {"tokenizer": "/tok/tokenizer.json", "length": 2048,
                                           "overflow": "truncate", "pack_ratio": 4}},
                      "rename": {"content": "text"},
                      "shuffle": {"seed": 1, "window": 4096},
                      "filters": [["lang", "==", "en"]]}, ...],
         "stop": "first_exhausted", "source_column": "source", "seed": 0}

    ``stop`` is an int number of steps or a rule name. A source's
    ``columns`` is a list of names, or of objects with a ``name`` and
    :class:`meshfeed.Column`'s fields (``tokenizer``, ``add_special_tokens``,
    ``dtype``, ``length``, ``overflow``, ``fill``, ``pack_ratio``, ...), or an
    object mapping each name to such fields (or null)."""
    from .config import Shuffle
    if not isinstance(spec, Mapping) or not isinstance(spec.get("sources"), list):
        raise InvalidRequestError(f"mixture spec {spec!r}: want an object with a list of sources")
    unknown = set(spec) - {"sources", "stop", "source_column", "seed"}
    if unknown:
        raise InvalidRequestError(f"mixture spec: unknown keys {sorted(unknown)}")
    srcs = []
    for i, s in enumerate(spec["sources"]):
        if not isinstance(s, Mapping) or "data" not in s or \
                set(s) - {"data", "weight", "columns", "rename", "shuffle", "filters"}:
            raise InvalidRequestError(f"mixture spec sources[{i}] {s!r}: want data, and optionally weight, "
                                      "columns, rename, shuffle ({seed, window}), filters")
        sh = s.get("shuffle")
        srcs.append(Source(s["data"], weight=s.get("weight", 1.0), columns=_spec_columns(i, s.get("columns")),
                           rename=s.get("rename"),
                           shuffle=Shuffle(**sh) if isinstance(sh, Mapping) else sh, filters=s.get("filters")))
    return Mixture(srcs, stop=spec.get("stop", "first_exhausted"), source_column=spec.get("source_column"),
                   seed=spec.get("seed", 0))


def _spec_columns(i: int, cols: Any) -> Any:
    """A spec source's ``columns`` as Source takes them: names stay names;
    column objects (``{"name": ..., fields}`` in a list, or ``{name: fields}``)
    become :class:`meshfeed.Column` s, their fields checked by it."""
    from .config import Column
    fields = {f.name for f in dataclasses.fields(Column)}

    def column(name: Any, obj: Any) -> Any:
        if obj is None:
            return None
        if not isinstance(obj, Mapping) or set(obj) - fields:
            raise InvalidRequestError(f"mixture spec sources[{i}] column {name!r}: {obj!r}: want an object of "
                                      f"meshfeed.Column fields ({', '.join(sorted(fields))}) or null")
        return Column(**obj)

    if isinstance(cols, Mapping):
        return {name: column(name, obj) for name, obj in cols.items()}
    if isinstance(cols, list) and any(isinstance(c, Mapping) for c in cols):
        out = {}
        for c in cols:
            if isinstance(c, str):
                out[c] = None
            elif isinstance(c, Mapping) and isinstance(c.get("name"), str):
                out[c["name"]] = column(c["name"], {k: v for k, v in c.items() if k != "name"})
            else:
                raise InvalidRequestError(f"mixture spec sources[{i}] columns: {c!r}: want a name or an object with a name")
        return out
    return cols


def _integer_weights(weights: Sequence[float]) -> list[int]:
    """The weights as the server's integers (Go's batching.QuantizeWeights):
    short decimals exactly (``w * 10**k``, k <= 9, each at most 2**32), else
    ``round(2**32 * w / max(w))`` (halves away from zero)."""
    from decimal import Decimal
    ds = [Decimal(repr(float(w))) for w in weights]
    k = max(max(0, -d.as_tuple().exponent) for d in ds)  # type: ignore[operator]
    if k <= 9:
        u = [int(d * 10 ** k) for d in ds]
        if all(v <= 1 << 32 for v in u):
            return u
    hi = max(weights)
    return [math.floor(math.ldexp(w / hi, 32) + 0.5) for w in weights]


class Positions:
    """Every source's position (rows per slice delivered so far) at a step:
    the composition of docs/DESIGN.md, "Mixtures", walked step by step as the
    server walks it (earliest deadline first within each weight span). It
    only moves forward; state() asks it for the current step.

    ``switch``: ``(rows per slice before, step)`` of an elastic switch
    (docs/CONTRACT-elastic.md, "Mixtures"): a span starts there, and the
    steps before it counted the old slice rows."""

    def __init__(self, mixture: Mixture, slice_rows: int, switch: tuple[int, int] | None = None):
        spans = [(h.from_step, list(h.weights), None if h.positions is None else list(h.positions))
                 for h in mixture.history]
        spans.append((mixture.weights_from, [s.weight for s in mixture.sources],
                      None if mixture.weights_from_positions is None else list(mixture.weights_from_positions)))
        self._init(spans, len(mixture.sources), slice_rows, switch)

    @classmethod
    def of_spans(cls, spans: Sequence[tuple[int, Sequence[float], Sequence[int] | None]], n: int,
                 slice_rows: int, switch: tuple[int, int] | None = None) -> "Positions":
        """Positions of ``n`` sources over ``spans`` (from step, weights,
        positions or None), as a ticket's mixture gives them."""
        p = cls.__new__(cls)
        p._init(spans, n, slice_rows, switch)
        return p

    def _init(self, spans: Sequence[tuple[int, Sequence[float], Sequence[int] | None]], n: int,
              slice_rows: int, switch: tuple[int, int] | None) -> None:
        # Walks begin at the last span that carries the positions at its
        # start (the server's Composition.Walk): the spans before are never
        # recomputed, their weights possibly those of removed sources.
        origin = max((j for j, sp in enumerate(spans) if sp[2] is not None), default=0)
        old, at = switch if switch is not None else (slice_rows, 0)
        self._spans: list[tuple[int, list[int], int]] = []
        for j, (frm, ws, _) in enumerate(spans):
            if j < origin:
                continue
            u = _integer_weights(ws)
            self._spans.append((frm, u, old if frm < at else slice_rows))
            if at > frm and (j + 1 == len(spans) or spans[j + 1][0] > at):
                self._spans.append((at, u, slice_rows))
        start = spans[origin][2]
        self._step, self._span = spans[origin][0], 0
        self._cum = [0] * n if start is None else [int(v) for v in start]
        self._base = list(self._cum)

    def at(self, step: int) -> list[int]:
        """C_i(step) for every source; ``step`` must not go back (nor
        before the last span carrying positions)."""
        if step < self._step:
            raise MeshfeedError(f"mixture positions at step {step}: the walk stands at step {self._step}")
        while self._step < step:
            self._next()
        return list(self._cum)

    def _next(self) -> None:
        spans = self._spans
        if self._span + 1 < len(spans) and spans[self._span + 1][0] == self._step:
            self._span += 1
            self._base = list(self._cum)
        frm, u, b = spans[self._span]
        total = sum(u)
        rows = (self._step - frm + 1) * b
        counts, opt, left = [], [], b
        for i, ui in enumerate(u):
            fl, rem = divmod(rows * ui, total)
            local = self._cum[i] - self._base[i]
            must = max(0, fl - local)
            counts.append(must)
            left -= must
            if rem and local + must == fl:
                opt.append((-(-(fl + 1) * total // (b * ui)), i))
        if not 0 <= left <= len(opt):
            raise MeshfeedError(f"mixture composition at step {self._step}: {left} rows for {len(opt)} sources")
        for _, i in sorted(opt)[:left]:
            counts[i] += 1
        self._cum = [c + n for c, n in zip(self._cum, counts)]
        self._step += 1
