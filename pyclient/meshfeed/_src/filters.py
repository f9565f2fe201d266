"""The ``filters=`` argument: pyarrow.parquet's filters (a list of
``(column, op, value)`` tuples, or a list of such lists) checked and written
in the ticket's JSON form (docs/PROTOCOL.md, "Filters"). The server parses,
types and applies them; this module only turns Python values into typed JSON
values and reports malformed filters at construction."""

from __future__ import annotations

import base64
import datetime
import decimal
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

OPS = ("==", "=", "!=", "<", "<=", ">", ">=", "in", "not in")


class _Bad(Exception):
    pass


def _value(v: Any) -> Any:
    """The ticket's typed JSON form of one filter value."""
    if v is None or isinstance(v, (bool, np.bool_)):
        return None if v is None else bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        if math.isnan(f):
            return {"float": "nan"}
        if math.isinf(f):
            return {"float": "inf" if f > 0 else "-inf"}
        return f
    if isinstance(v, str):
        return v
    if isinstance(v, (bytes, bytearray, memoryview)):
        return {"bytes": base64.b64encode(bytes(v)).decode("ascii")}
    if isinstance(v, decimal.Decimal):
        if not v.is_finite():
            raise _Bad(f"Decimal {v} is not finite")
        return {"decimal": format(v, "f")}
    if isinstance(v, datetime.datetime):  # before date: a datetime is a date
        return {"timestamp": v.isoformat()}
    if isinstance(v, datetime.date):
        return {"date": v.isoformat()}
    if isinstance(v, np.datetime64):
        if np.isnat(v):
            raise _Bad("NaT compares with nothing: leave the term out, or use ('col', 'in', [None]) for nulls")
        unit = np.datetime_data(v.dtype)[0]
        if unit in ("Y", "M", "W", "D"):
            return {"date": str(v.astype("datetime64[D]"))}
        return {"timestamp": str(np.datetime_as_string(v))}
    raise _Bad(f"value {v!r} of type {type(v).__name__}: want None, a bool, int, float, str, bytes, "
               "decimal.Decimal, datetime.date, datetime.datetime or numpy.datetime64")


def _set(v: Any) -> list[Any]:
    if isinstance(v, (str, bytes, Mapping)) or not isinstance(v, (Sequence, set, frozenset, np.ndarray)):
        raise _Bad(f"value {v!r}: 'in' and 'not in' want a list, tuple or set of values")
    items = list(v)
    if isinstance(v, (set, frozenset)):
        try:
            items = sorted(items, key=lambda x: (x is None, x))  # a stable order, so the fingerprint is too
        except TypeError:
            pass
    return [_value(x) for x in items]


def wire_filters(filters: Any, bad: Callable[[str], None]) -> tuple[tuple[dict[str, Any], ...], ...] | None:
    """The ticket's ``filters`` (a tuple of conjunctions of term objects) for
    the Loader's ``filters`` argument, or None; each problem goes to ``bad``."""
    if filters is None:
        return None
    if isinstance(filters, (str, bytes)) or not isinstance(filters, Sequence):
        bad(f"filters={filters!r}: want a list of (column, op, value) tuples or a list of such lists "
            "(pyarrow.parquet's DNF form)")
        return None
    if not filters or any(isinstance(f, Sequence) and not isinstance(f, str) and len(f) == 0 for f in filters):
        bad("filters: malformed: an empty list (pass None to keep every row)")
        return None
    groups = [filters] if isinstance(filters[0], Sequence) and filters[0] and isinstance(filters[0][0], str) else filters
    out = []
    for gi, conj in enumerate(groups):
        if isinstance(conj, str) or not isinstance(conj, Sequence):
            bad(f"filters[{gi}]={conj!r}: want a list of (column, op, value) tuples")
            continue
        terms = []
        for ti, term in enumerate(conj):
            where = f"filters[{gi}][{ti}]"
            if isinstance(term, str) or not isinstance(term, Sequence) or len(term) != 3:
                bad(f"{where}={term!r}: want a (column, op, value) tuple")
                continue
            col, op, val = term
            if not isinstance(col, str) or not col:
                bad(f"{where}: column {col!r}: want a column name")
                continue
            if op not in OPS:
                bad(f"{where}: column {col!r}: op {op!r} is unknown: want one of {', '.join(OPS)}")
                continue
            try:
                v = _set(val) if op in ("in", "not in") else _value(val)
            except _Bad as e:
                bad(f"{where}: column {col!r}: {e}")
                continue
            terms.append({"column": col, "op": "==" if op == "=" else op, "value": v})
        out.append(tuple(terms))
    return tuple(out)
