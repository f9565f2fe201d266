"""The JAX client's rules for the Arrow types the server delivers (docs/TYPES.md).

- Columns with a JAX dtype become arrays: integers, floats (float16 included),
  booleans, fixed-size lists and tensors of those; timestamps, dates, times and
  durations as the integers of their unit (int64, date32/time32 as int32).
- Structs become one key per leaf, named ``"parent.child"`` (nested structs
  ``"a.b.c"``); a null struct makes its leaves null.
- Columns without a JAX form (strings, binary, decimals unless the request casts
  them, maps, variable-length lists) come back as pyarrow arrays of this
  process's rows.
- A decimal asked for as ``Column(dtype="float32")`` or (x64 on) ``"float64"``
  arrives as the float nearest to each value, the scale applied by the server.
- Nulls never become silent values. A column requested without a fill arrives
  with Arrow validity (the server says in the field metadata
  ``meshfeed.null_count`` how many nulls the footers record, or ``unknown``):
  a numeric column with recorded nulls is refused when the Loader is built, one
  whose writer recorded no count is refused at the first step that holds a null.
  A list given a length holds nulls when it has null lists or null elements
  (the server counts those, not empty lists, where the writer recorded
  definition level histograms).
  ``Column(fill=..., mask=True)`` instead fills them here and adds the boolean
  ``<name>_valid``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from .errors import InvalidRequestError, MeshfeedError

NULL_COUNT_KEY = b"meshfeed.null_count"


def jax_integer_view(t: pa.DataType) -> pa.DataType | None:
    """The integer type whose values are those of temporal type ``t`` (the
    count of its unit), or None when ``t`` is not temporal."""
    if pa.types.is_timestamp(t) or pa.types.is_duration(t) or pa.types.is_date64(t) or pa.types.is_time64(t):
        return pa.int64()
    if pa.types.is_date32(t) or pa.types.is_time32(t):
        return pa.int32()
    return None


def _leaves(prefix: str, field: pa.Field, out: list[pa.Field]) -> None:
    if pa.types.is_struct(field.type):
        for child in field.type:
            _leaves(f"{prefix}{field.name}.", child.with_nullable(child.nullable or field.nullable), out)
        return
    out.append(field.with_name(prefix + field.name))


def has_structs(schema: pa.Schema) -> bool:
    """Whether ``schema`` has a struct column (records then need flatten_batch)."""
    return any(pa.types.is_struct(f.type) for f in schema)


def flatten_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with each struct column replaced by its leaves (``"a.b"``)."""
    out: list[pa.Field] = []
    for f in schema:
        _leaves("", f, out)
    return pa.schema(out, metadata=schema.metadata)


def _flatten_array(name: str, arr: pa.Array, names: list[str], arrays: list[pa.Array]) -> None:
    if pa.types.is_struct(arr.type):
        # StructArray.flatten folds the struct's validity into each child.
        for child, f in zip(arr.flatten(), arr.type):
            _flatten_array(f"{name}.{f.name}", child, names, arrays)
        return
    names.append(name)
    arrays.append(arr)


def flatten_batch(rb: pa.RecordBatch) -> pa.RecordBatch:
    """``rb`` with each struct column replaced by its leaves, as flatten_schema."""
    names: list[str] = []
    arrays: list[pa.Array] = []
    for f, col in zip(rb.schema, rb.columns):
        _flatten_array(f.name, col, names, arrays)
    return pa.RecordBatch.from_arrays(arrays, names=names)


def recorded_nulls(field: pa.Field) -> int | None:
    """The footers' null count of a column requested without a fill: an int, -1
    when a writer recorded none, None when the column holds no nulls."""
    v = (field.metadata or {}).get(NULL_COUNT_KEY)
    if v is None:
        return None
    return -1 if v == b"unknown" else int(v)


def check_nulls_at_construction(schema: pa.Schema, dense: set[str]) -> None:
    """Refuses, before the first step, array columns whose footers record nulls."""
    bad = []
    for f in schema:
        n = recorded_nulls(f)
        if f.name in dense and n is not None and n > 0:
            bad.append(f"{f.name!r} ({n} nulls)")
    if bad:
        raise InvalidRequestError(
            f"columns {', '.join(bad)} hold nulls (the files' footers say so) and have no fill: a jax.Array has no "
            "nulls; give each a fill, e.g. columns={name: meshfeed.Column(fill=0)}, or leave them out")


def check_batch_nulls(rb: pa.RecordBatch, dense: set[str]) -> None:
    """Refuses a record whose array columns hold nulls (writers that record no null count)."""
    for f, col in zip(rb.schema, rb.columns):
        if f.name in dense and col.null_count:
            raise MeshfeedError(
                f"column {f.name!r}: {col.null_count} nulls in this step and no fill (the files' writer recorded no "
                "null counts, so this could not be known before): give the column a fill, e.g. "
                "columns={name: meshfeed.Column(fill=0)}")


def masked_columns(columns: Any) -> dict[str, float]:
    """{name: fill} of the columns requested with ``Column(mask=True)``."""
    if not isinstance(columns, Mapping):
        return {}
    out = {}
    for name, col in columns.items():
        if col is not None and getattr(col, "mask", False):
            f = col.fill
            out[name] = 0.0 if f is None else float(f)
    return out


def fill_and_mask(arr: pa.Array, view: np.ndarray, fill: float) -> tuple[np.ndarray, np.ndarray]:
    """The values of ``view`` (rows of ``arr``) with ``fill`` at its nulls, and
    the rows' validity (True: a value)."""
    if not arr.null_count:
        return view, np.ones(len(arr), dtype=np.bool_)
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    shape = (len(valid),) + (1,) * (view.ndim - 1)
    return np.where(valid.reshape(shape), view, np.asarray(fill).astype(view.dtype)), valid
