"""From a jax Sharding to the batch slices of the contract, and from received
Arrow record batches to sharded jax.Arrays without host copies."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import warnings
from typing import Any, Mapping, Sequence

import jax
import ml_dtypes
import numpy as np
import pyarrow as pa

from .arrowtypes import check_batch_nulls, check_nulls_at_construction, fill_and_mask, flatten_batch, flatten_schema, \
    has_structs, jax_integer_view
from .errors import InvalidRequestError, MeshfeedError
from .plan import rows_per_slice

# XLA's CPU client aliases host memory passed to device_put (no copy) only
# when it is aligned to this many bytes; otherwise it copies.
CPU_ALIAS_ALIGNMENT = 64
_MOD_ALIGN = CPU_ALIAS_ALIGNMENT.__rmod__  # a -> a % 64, in C


@dataclasses.dataclass(frozen=True)
class Layout:
    """How the batch dimension of ``sharding`` maps onto the contract's slices.

    Attributes:
        B: global batch size.
        b: rows per slice.
        D: number of distinct slices (data-parallel degree).
        slices: the distinct slices this process's devices hold, ascending.
        devices: (device, k) for every addressable device, k being the position
            of the device's slice in ``slices``.
    """

    B: int
    b: int
    D: int
    slices: tuple[int, ...]
    devices: tuple[tuple[Any, int], ...]


def layout_of(sharding: jax.sharding.Sharding, B: int) -> Layout:
    """Derives the Layout of dimension 0 of a (B, ...) array laid out as ``sharding``."""
    try:
        idx = sharding.devices_indices_map((B,))
    except Exception as e:  # noqa: BLE001 - jax raises various types here
        raise InvalidRequestError(
            f"sharding {sharding} cannot lay out a batch dimension of {B} rows ({type(e).__name__}: {e}); "
            "the sharding must describe dimension 0 only, e.g. PartitionSpec('data'), and divide B") from e
    starts: dict[Any, int] = {}
    sizes: dict[Any, int] = {}
    for dev, index in idx.items():
        start, stop, step = index[0].indices(B)
        if step != 1:
            raise InvalidRequestError(f"sharding {sharding}: device {dev} holds rows {index[0]} with a step")
        starts[dev], sizes[dev] = start, stop - start
    # D: the distinct slices the devices hold; every one has b = B / D rows.
    D = len(set(starts.values()))
    try:
        b = rows_per_slice(B, D)
    except ValueError as e:
        raise InvalidRequestError(f"sharding {sharding}: {e}") from e
    for dev, n in sizes.items():
        if n != b:
            raise InvalidRequestError(f"sharding {sharding}: devices hold batch slices of different sizes "
                                      f"({b} and {n} rows of {B})")
    for dev, start in starts.items():
        if start % b:
            raise InvalidRequestError(f"sharding {sharding}: device {dev} starts at row {start}, not a multiple of {b}")
    me = jax.process_index()
    local = [(dev, start // b) for dev, start in starts.items() if dev.process_index == me]
    if not local:
        raise InvalidRequestError(f"sharding {sharding} has no device of this process (process_index {me})")
    slices = tuple(sorted({d for _, d in local}))
    pos = {d: k for k, d in enumerate(slices)}
    return Layout(B=B, b=b, D=D, slices=slices, devices=tuple((dev, pos[d]) for dev, d in local))


def packed_layout(layout: Layout, columns: Sequence[Mapping[str, Any]] | None) -> Layout:
    """The layout of the rows a step delivers: ``layout``, or with a packed
    column (``pack_ratio`` >= 1) slices of ``ceil(b / pack_ratio)`` packed
    rows each (the server's shape.PackedRows), so a step's arrays have
    ``D * ceil(b / pack_ratio)`` rows laid out by the same sharding."""
    for c in columns or ():
        r = c.get("pack_ratio") or 0
        if r >= 1 and math.isfinite(r):
            p = math.ceil(layout.b / r)
            return dataclasses.replace(layout, B=p * layout.D, b=p)
    return layout


@dataclasses.dataclass(frozen=True)
class ColumnSpec:
    """How one schema field becomes an output array."""

    name: str
    kind: str  # "dense" (numpy view), "bool" (bit-unpacked), "arrow" (pyarrow array)
    dtype: Any = None  # numpy dtype of the dense view
    trailing: tuple[int, ...] = ()  # dimensions after the batch dimension
    depth: int = 0  # fixed_size_list levels above the values


def _meta(field: pa.Field) -> dict[bytes, bytes]:
    return dict(field.metadata or {})


def column_spec(field: pa.Field) -> ColumnSpec:
    """Derives the ColumnSpec of a schema field (see docs/PROTOCOL.md, "Schema conventions")."""
    meta = _meta(field)
    t = field.type
    shape: tuple[int, ...] | None = None
    if isinstance(t, pa.FixedShapeTensorType):
        if t.permutation is not None and list(t.permutation) != list(range(len(t.shape))):
            raise MeshfeedError(f"column {field.name!r}: fixed_shape_tensor permutation {t.permutation} is not supported")
        shape = tuple(t.shape)
        t = t.storage_type
    elif isinstance(t, pa.ExtensionType):
        return ColumnSpec(field.name, "arrow")
    elif meta.get(b"ARROW:extension:name") == b"arrow.fixed_shape_tensor":
        try:
            shape = tuple(int(x) for x in json.loads(meta.get(b"ARROW:extension:metadata", b"{}"))["shape"])
        except (ValueError, KeyError, TypeError) as e:
            raise MeshfeedError(f"column {field.name!r}: bad fixed_shape_tensor metadata {meta!r}: {e}") from e
    if (iv := jax_integer_view(t)) is not None:
        t = iv  # timestamps, dates, times, durations: the integers of their unit
    dims: list[int] = []
    while pa.types.is_fixed_size_list(t):
        dims.append(t.list_size)
        t = t.value_type
    depth = len(dims)
    if pa.types.is_boolean(t):
        return ColumnSpec(field.name, "bool" if depth == 0 else "arrow")
    if not (pa.types.is_integer(t) or pa.types.is_floating(t)):
        return ColumnSpec(field.name, "arrow")
    dtype = np.dtype(t.to_pandas_dtype())
    if meta.get(b"meshfeed.dtype") == b"bfloat16":
        if not pa.types.is_uint16(t):
            raise MeshfeedError(f"column {field.name!r}: meshfeed.dtype=bfloat16 on {t}, want uint16")
        dtype = np.dtype(ml_dtypes.bfloat16)
    trailing = tuple(dims)
    if shape is not None:
        if int(np.prod(shape)) != int(np.prod(dims)) or depth == 0:
            raise MeshfeedError(f"column {field.name!r}: tensor shape {list(shape)} does not match {field.type}")
        trailing = shape
    return ColumnSpec(field.name, "dense", dtype, trailing, depth)


# What the server narrows a 64-bit column to when jax_enable_x64 is off (JAX
# would convert it on the host: a copy of every step).
_NARROW = {np.dtype(np.int64): "int32", np.dtype(np.uint64): "uint32", np.dtype(np.float64): "float32"}


def narrowed_columns(schema: pa.Schema, columns: Sequence[Mapping[str, Any]] | None,
                     mask_key: str | None) -> list[dict[str, Any]] | None:
    """The request's column objects with a narrowing dtype for every 64-bit
    array column of ``schema`` that JAX would otherwise convert on the host
    (jax_enable_x64 off): int64 to int32, uint64 to uint32, float64 to
    float32, done by the server, which checks integer overflow. ``columns``
    None means all of the schema's columns (the mask ``mask_key`` aside).
    None when nothing needs narrowing. A column asked for as ``float64``
    (decimals) needs x64: without it, an InvalidRequestError."""
    if not jax.config.jax_enable_x64:
        wide = sorted(c["name"] for c in columns or () if c.get("dtype") == "float64")
        if wide:
            raise InvalidRequestError(
                f"columns {wide} are asked for as float64 but jax_enable_x64 is off (jax would make them float32): "
                "enable x64 (jax.config.update('jax_enable_x64', True)) or ask for dtype='float32'")
    targets = {}
    for f in schema:
        spec = column_spec(f)
        if spec.kind == "dense" and spec.dtype in _NARROW and jax.dtypes.canonicalize_dtype(spec.dtype) != spec.dtype:
            targets[f.name] = _NARROW[spec.dtype]
    if not targets:
        return None
    if columns is None:
        columns = [{"name": f.name} for f in schema if f.name != mask_key]
    out = []
    for c in columns:
        c = dict(c)
        if c["name"] in targets and c.get("dtype") is None:
            c["dtype"] = targets[c["name"]]
        out.append(c)
    return out


def dense_view(arr: pa.Array, spec: ColumnSpec) -> tuple[np.ndarray, pa.Buffer, int]:
    """A numpy view (no copy) of the values of ``arr``, shaped (rows, *trailing),
    the Arrow buffer it points into and the view's address. Columns with nulls never get here
    (Materializer refuses them: the server writes fill values)."""
    if isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    n = len(arr)
    start = arr.offset
    per_row = 1
    a = arr
    for _ in range(spec.depth):
        size = a.type.list_size
        child = a.values  # does not apply a's offset
        start = child.offset + start * size
        per_row *= size
        a = child
    buf = a.buffers()[1]
    item = spec.dtype.itemsize
    view = np.frombuffer(buf, dtype=spec.dtype, count=n * per_row, offset=start * item)
    return view.reshape((n, *spec.trailing)), buf, buf.address + start * item


def unpack_bool(arr: pa.Array) -> np.ndarray:
    """The boolean values of ``arr`` unpacked from Arrow's bitmap (a copy)."""
    n, off = len(arr), arr.offset
    bits = np.frombuffer(arr.buffers()[1], dtype=np.uint8)
    return np.unpackbits(bits, count=off + n, bitorder="little")[off:].view(np.bool_)


class HostStep(dict):
    """One step's host columns, as ``Materializer.host`` gives them (a dict),
    and ``unaligned``: per column of NumPy views, the devices whose slice's
    rows do not start 64-byte aligned (counted from the addresses the views
    were made from; a transform's placement of an input it returns unchanged
    uses them instead of asking each view)."""

    __slots__ = ("unaligned",)
    unaligned: dict[str, int]


class Materializer:
    """Turns one record (this process's slices, concatenated in ascending slice
    order) into a dict of global jax.Arrays laid out as ``sharding``."""

    def __init__(self, schema: pa.Schema, sharding: jax.sharding.Sharding, layout: Layout, mask_key: str | None,
                 masks: dict[str, float] | None = None):
        self.sharding = sharding
        self.layout = layout
        self.mask_key = mask_key
        # Structs become one key per leaf ("a.b"); see arrowtypes.
        self.flatten = has_structs(schema)
        schema = flatten_schema(schema)
        self.specs = [column_spec(f) for f in schema]
        self.schema = schema
        # Column(mask=True): the client fills the nulls and adds <name>_valid.
        self.masks = dict(masks or {})
        for name in self.masks:
            if name not in {s.name for s in self.specs if s.kind == "dense"}:
                raise InvalidRequestError(f"column {name!r}: mask=True needs a numeric column that becomes an array")
        self.dense = {s.name for s in self.specs if s.kind != "arrow"} - set(self.masks)
        check_nulls_at_construction(schema, self.dense)
        L = layout
        for s in self.specs:
            if s.kind == "arrow":
                continue
            shape = (L.B, *s.trailing)
            want = (L.b, *s.trailing)
            try:
                got = tuple(sharding.shard_shape(shape))
            except Exception as e:  # noqa: BLE001
                raise InvalidRequestError(f"column {s.name!r} of shape {shape}: sharding {sharding} cannot lay it out: {e}") from e
            if got != want:
                raise InvalidRequestError(
                    f"column {s.name!r} of shape {shape}: sharding {sharding} gives shards of {got}, "
                    f"want {want} (only the batch dimension may be split)")
        # Without jax_enable_x64, device_put converts 64-bit values to 32 bits:
        # a host copy (and a narrowing). The Loader asks the server for the
        # narrow dtype instead; a Materializer given such a schema anyway warns.
        self.narrowed = {s.name for s in self.specs
                         if s.kind == "dense" and jax.dtypes.canonicalize_dtype(s.dtype) != s.dtype}
        if self.narrowed:
            warnings.warn(
                f"meshfeed: columns {sorted(self.narrowed)} are 64-bit but jax_enable_x64 is off: jax converts "
                "them to 32 bits with a host copy; ask for Column(dtype=...) or enable x64", stacklevel=3)
        # For the unaligned_transfers counter without a loop over devices:
        # how many devices hold local slice k.
        self._devs_per_slice = np.bincount([k for _, k in L.devices], minlength=len(L.slices))
        self._devs_per_slice_list = [int(n) for n in self._devs_per_slice]
        self._slice_starts = np.arange(len(L.slices), dtype=np.int64)
        # Counters of the last call; for tests, its (numpy view, Arrow buffer)
        # pairs (buffer None for unpacked booleans).
        self.counts = {"host_copies": 0, "mask_unpacks": 0, "unaligned_transfers": 0}
        self._unaligned_by: dict[str, int] = {}
        self._placed = False  # the first step checks the direct placement (place_slices)
        self.last_views: dict[str, tuple[np.ndarray, pa.Buffer | None]] = {}

    def _unaligned_addrs(self, addrs: list[int]) -> int:
        """Devices whose slice starts at an address of ``addrs`` (one per
        local slice) that is not 64-byte aligned (plain Python: 8 numbers;
        none, the shared-memory wire's case, is found without a Python-level
        generator)."""
        if not any(map(_MOD_ALIGN, addrs)):
            return 0
        return sum(n for n, a in zip(self._devs_per_slice_list, addrs) if a % CPU_ALIAS_ALIGNMENT)

    def _unaligned(self, view: np.ndarray, slice_bytes: int) -> int:
        """Devices whose rows of ``view`` do not start 64-byte aligned."""
        base = view.ctypes.data
        if slice_bytes % CPU_ALIAS_ALIGNMENT == 0:
            return int(self._devs_per_slice.sum()) if base % CPU_ALIAS_ALIGNMENT else 0
        off = (base + self._slice_starts * slice_bytes) % CPU_ALIAS_ALIGNMENT != 0
        return int(self._devs_per_slice[off].sum())

    def __call__(self, rb: Any) -> dict[str, Any]:
        """Materializes one step, given as one record (this process's slices
        concatenated: Flight), as one record per local slice, or as a
        shared-memory step (shm.ShmChunk: per-slice buffers, every one
        64-byte aligned, whose numeric columns are viewed without building
        records); its counters are in ``counts`` afterwards."""
        out, placed, per_slice = self._gather(rb)
        if per_slice:
            arrays = self._place_slices(placed)
        else:
            arrays = place([self.sharding] * len(placed), [vs[0] for _, _, vs in placed], [sh for _, sh, _ in placed])
        for (name, _, _), arr in zip(placed, arrays):
            out[name] = arr
        return out

    def host(self, rb: Any) -> dict[str, Any]:
        """One step's columns on the host, for a transform (nothing placed):
        each numeric or boolean column as a list of NumPy views, one per
        local slice (shared memory) or one of all of them (a Flight record),
        the others as pyarrow arrays; in the order ``__call__`` gives them.
        Its counters are in ``counts`` afterwards."""
        out, placed, _ = self._gather(rb)
        for name, _, vs in placed:
            out[name] = vs
        host = HostStep(out)
        host.unaligned = self._unaligned_by
        return host

    def _gather(self, rb: Any) -> tuple[dict[str, Any], list[tuple[str, tuple[int, ...], list[np.ndarray]]], bool]:
        """The step's arrow columns (in ``out``, where placed columns hold
        None), what is to be placed (name, global shape, views) and whether
        the views are per slice."""
        L = self.layout
        direct = None if self.flatten else getattr(rb, "dense", None)
        if direct is not None:
            if rb.slices != len(L.slices) or rb.rows != L.b:
                raise MeshfeedError(f"step of {rb.slices} slices of {rb.rows} rows, "
                                    f"want {len(L.slices)} slices of {L.b} rows")
            per_slice, recs = True, None  # records only for the columns that need them
        else:
            src = rb if isinstance(rb, (pa.RecordBatch, list, tuple)) else rb.data
            per_slice = not isinstance(src, pa.RecordBatch)
            recs = self._records(src)
        copies = unpacks = unaligned = 0
        self._unaligned_by = by = {}  # per dense column (host(): a transform places them later)
        out: dict[str, Any] = {}
        views: dict[str, tuple[np.ndarray, pa.Buffer | None]] = {}
        # What is placed, in one call: (name, global shape, views: one per
        # record of recs).
        placed: list[tuple[str, tuple[int, ...], list[np.ndarray]]] = []
        ndev = len(L.devices)
        for i, spec in enumerate(self.specs):
            out[spec.name] = None  # in schema order; placed below
            if direct is not None and spec.kind == "dense" and spec.name not in self.masks \
                    and (got := direct(i, spec.dtype, (L.b, *spec.trailing))) is not None:
                vs, addrs = got
                if spec.name in self.narrowed:
                    copies += ndev
                else:
                    by[spec.name] = n = self._unaligned_addrs(addrs)
                    unaligned += n
                views[spec.name] = (vs[0], None)
                placed.append((spec.name, (L.B, *spec.trailing), vs))
                continue
            if direct is not None and spec.kind == "bool" and (vs := rb.bits(i)) is not None:
                if spec.name == self.mask_key:
                    unpacks += 1
                else:
                    copies += 1
                views[spec.name] = (vs[0], None)
                placed.append((spec.name, (L.B,), vs))
                continue
            if recs is None:
                recs = self._records(rb.data)
            cols = [r.column(i) for r in recs]
            if spec.kind == "arrow":
                out[spec.name] = cols[0] if len(cols) == 1 else pa.concat_arrays(cols)
                continue
            vs, valids, buf, addrs = [], [], None, []
            for col in cols:
                if spec.kind == "bool":
                    v, buf = unpack_bool(col), None
                else:
                    v, buf, addr = dense_view(col, spec)
                    addrs.append(addr)
                    if spec.name in self.masks:
                        if col.null_count:
                            copies += 1
                        v, valid = fill_and_mask(col, v, self.masks[spec.name])
                        valids.append(valid)
                vs.append(v)
            if spec.kind == "bool":
                if spec.name == self.mask_key:
                    unpacks += 1
                else:
                    copies += 1
            elif spec.name in self.narrowed:
                copies += ndev
            elif per_slice:
                # devices whose slice's view is not 64-byte aligned (counted per slice)
                by[spec.name] = n = self._unaligned_addrs(addrs)
                unaligned += n
            else:
                by[spec.name] = n = self._unaligned(vs[0], L.b * vs[0][:1].nbytes)
                unaligned += n
            views[spec.name] = (vs[0], buf)
            placed.append((spec.name, (L.B, *spec.trailing), vs))
            if valids:
                out[spec.name + "_valid"] = None
                placed.append((spec.name + "_valid", (L.B,), valids))
        self.last_views = views
        self.counts = {"host_copies": copies, "mask_unpacks": unpacks, "unaligned_transfers": unaligned}
        return out, placed, per_slice

    def _records(self, rb: pa.RecordBatch | Sequence[pa.RecordBatch]) -> list[pa.RecordBatch]:
        """The step's records, checked (rows, nulls) and with structs flattened."""
        L = self.layout
        per_slice = not isinstance(rb, pa.RecordBatch)
        recs = list(rb) if per_slice else [rb]
        if per_slice and (len(recs) != len(L.slices) or any(r.num_rows != L.b for r in recs)):
            raise MeshfeedError(f"step of {[r.num_rows for r in recs]} rows per slice, "
                                f"want {len(L.slices)} slices of {L.b} rows")
        if not per_slice and recs[0].num_rows != len(L.slices) * L.b:
            raise MeshfeedError(f"record of {recs[0].num_rows} rows, want {len(L.slices) * L.b} "
                                f"({len(L.slices)} slices of {L.b} rows)")
        if self.flatten:
            recs = [flatten_batch(r) for r in recs]
        for r in recs:
            check_batch_nulls(r, self.dense)
        return recs

    def _place_slices(self, placed: list[tuple[str, tuple[int, ...], list[np.ndarray]]]) -> list[jax.Array]:
        """Per-slice views (aligned, so XLA aliases them) onto their devices,
        in one ``place_slices`` call for the whole step."""
        first = not self._placed
        self._placed = True
        return place_slices(self.sharding, self.layout, [(shape, vs) for _, shape, vs in placed],
                            direct=not self.narrowed, check=first)


# jax's own per-column transfer of per-device host arrays into one global
# array (what jax.device_put ends in, below its per-argument Python work):
# one C++ call per column instead of jax.device_put's 10-20 us per array.
# The C++ function itself (jaxlib's batched_device_put, which jax's
# pxla.batched_device_put wraps in a Python check of its inputs for arrays
# already on device: 8 isinstance tests and an aval per column, per step),
# called with avals and device lists made once. Private, so it is
# feature-detected and checked on first use (values, devices, aliasing);
# any surprise falls back to the public path for good.
try:
    from jax._src.core import ShapedArray as _ShapedArray
    from jax._src.lib import xla_client as _xc
    _batched_device_put = _xc.batched_device_put
except (ImportError, AttributeError):  # pragma: no cover - another jax
    _batched_device_put = None

_direct: dict[str, Any] = {"ok": None if _batched_device_put is not None else False, "why": ""}


def placement_path() -> str:
    """Which placement the shared-memory path uses: "direct" (one jax
    batched transfer per column), "device_put" (the public API, after a
    failed check), or "unchecked" before the first step."""
    ok = _direct["ok"]
    return "unchecked" if ok is None else "direct" if ok else "device_put"


@functools.lru_cache(maxsize=256)
def _aval(shape: tuple[int, ...], dtype: np.dtype) -> Any:
    """A column's abstract value (immutable: made once per shape and dtype)."""
    return _ShapedArray(shape, dtype)


# The last layout's device list and slice order: (layout, devices, slice
# positions or None when device i holds slice i). A one-entry cache checked
# by identity: a Layout's own hash is a Python-level call.
_devs_of: list[Any] = [None, [], None]


def _layout_devices(layout: Layout) -> tuple[list[Any], list[int] | None]:
    if _devs_of[0] is not layout:
        ks = [k for _, k in layout.devices]
        _devs_of[:] = [layout, [d for d, _ in layout.devices], None if ks == list(range(len(ks))) else ks]
    return _devs_of[1], _devs_of[2]


def _put_direct(sharding: jax.sharding.Sharding, layout: Layout,
                columns: list[tuple[tuple[int, ...], list[np.ndarray]]]) -> list[jax.Array]:
    devs, ks = _layout_devices(layout)
    put = _batched_device_put
    if ks is None:  # device i holds slice i: the views as they are
        return [put(_aval(shape, vs[0].dtype), sharding, vs, devs) for shape, vs in columns]
    return [put(_aval(shape, vs[0].dtype), sharding, [vs[k] for k in ks], devs) for shape, vs in columns]


def _put_public(sharding: jax.sharding.Sharding, layout: Layout,
                columns: list[tuple[tuple[int, ...], list[np.ndarray]]]) -> list[jax.Array]:
    L = layout
    views = [vs[k] for _, vs in columns for _, k in L.devices]
    devices = [dev for _ in columns for dev, _ in L.devices]
    singles = jax.device_put(views, devices) if views else []
    n = len(L.devices)
    return [jax.make_array_from_single_device_arrays(shape, sharding, singles[j * n:(j + 1) * n])
            for j, (shape, _) in enumerate(columns)]


def _check_direct(arrays: list[jax.Array], sharding: jax.sharding.Sharding, layout: Layout,
                  columns: list[tuple[tuple[int, ...], list[np.ndarray]]]) -> str:
    """Why the direct path's arrays are not what the public path makes ("" if they are)."""
    k_of = {d: k for d, k in layout.devices}
    for arr, (shape, vs) in zip(arrays, columns):
        if not isinstance(arr, jax.Array) or arr.shape != shape or arr.sharding != sharding \
                or arr.dtype != vs[0].dtype:
            return f"made {type(arr).__name__} {getattr(arr, 'shape', None)} {getattr(arr, 'sharding', None)}"
        for shard in arr.addressable_shards:
            v = vs[k_of[shard.device]]
            if np.asarray(shard.data).tobytes() != v.tobytes():  # bitwise: NaN equals itself
                return f"device {shard.device} holds other values than its slice"
            if v.ctypes.data % CPU_ALIAS_ALIGNMENT == 0 and shard.device.platform == "cpu" \
                    and shard.data.unsafe_buffer_pointer() != v.ctypes.data:
                return f"device {shard.device} copied an aligned slice"
    return ""


def place_slices(sharding: jax.sharding.Sharding, layout: Layout,
                 columns: list[tuple[tuple[int, ...], list[np.ndarray]]], direct: bool = True,
                 check: bool = True) -> list[jax.Array]:
    """One step onto the devices, in one call: for each column, its global
    shape and one host view per local slice (``layout.slices`` order); each
    device gets the view of its slice, aliased by XLA's CPU client when the
    view is 64-byte aligned. Returns one global jax.Array per column.

    ``direct=False`` takes the public path (jax.device_put converts dtypes
    that jax_enable_x64 rules out; the direct one would not); ``check``
    compares the direct path's arrays with their views first (a caller's
    first step)."""
    if not columns:
        return []
    if not direct or _direct["ok"] is False:
        return _put_public(sharding, layout, columns)
    try:
        arrays = _put_direct(sharding, layout, columns)
    except Exception as e:  # noqa: BLE001 - a changed private API: use the public one
        why = f"{type(e).__name__}: {e}"
    else:
        why = _check_direct(arrays, sharding, layout, columns) if check or not _direct["ok"] else ""
    if why:
        _direct.update(ok=False, why=why)
        warnings.warn(f"meshfeed: jax's batched transfer is not usable here ({why}); "
                      "placing through jax.device_put (slower per step)", stacklevel=3)
        return _put_public(sharding, layout, columns)
    _direct["ok"] = True
    return arrays


def place(shardings: list[jax.sharding.Sharding], local: list[np.ndarray],
          shapes: list[tuple[int, ...]]) -> list[jax.Array]:
    """Every array of one step onto the devices, in one call: each ``local``
    view holds this process's slices (ascending, concatenated) of a global
    array of ``shapes[i]`` laid out as ``shardings[i]``. On one process that
    is a single batched ``jax.device_put``; XLA's CPU client aliases the
    64-byte aligned per-device rows instead of copying them."""
    if not local:
        return []
    return jax.make_array_from_process_local_data(shardings, local, shapes)
