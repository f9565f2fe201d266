"""Every Parquet type pyarrow reads comes over Flight as pyarrow reads it.

Writes small Parquet files with pyarrow (every physical and logical type, nested
types, nulls, every codec and encoding pyarrow writes, files with and without
ARROW:schema, INT96, decimals as integers, legacy list naming, data page v2),
serves them with `meshfeed serve --backend pipeline`, asks for all rows of each
file as one padded step through the documented ticket with a plain
pyarrow.flight client, and compares every column with pyarrow.parquet.read_table:
same Arrow type, same values, same nulls. Files written by other writers
(testdata/otherwriters/, see its README) are compared the same way.

Values come from numpy generators with a fixed seed (MESHFEED_SEED overrides
it; the seed is printed).
"""

import datetime
import decimal
import json
import os
import pathlib
import shutil
import subprocess

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight
import pyarrow.parquet as pq
import pytest

from test_flight_interop import MAX_MSG, Server

HERE = pathlib.Path(__file__).resolve().parent
# Written by testdata/otherwriters (Go, arrow-go's low-level writer) into the
# test's temporary directory.
OTHER_FILES = ["empty_pages_v1.parquet", "empty_pages_v2.parquet", "gzip_multimember.parquet", "hadoop_lz4.parquet",
               "legacy_annotations.parquet", "legacy_lists.parquet"]
# Column chunks that start with a data page of 0 values (v1, v2): pyarrow 26
# reads each as 0 rows; meshfeed reads what the twin without that page holds.
LEADING_EMPTY = {"empty_pages_v1_leading.parquet": "empty_pages_v1.parquet",
                 "empty_pages_v2_leading.parquet": "empty_pages_v2.parquet"}
SEED = int(os.environ.get("MESHFEED_SEED", "13"))
N = 300  # rows per file: three row groups of 100


def with_nulls(values, typ, rng, frac=0.1):
    mask = rng.random(len(values)) < frac
    mask[1] = True  # at least one null, not in row 0
    return pa.array([None if m else v for v, m in zip(values, mask)], typ)


def scalar_table(rng):
    n = N
    ints = {f"{k}{b}": pa.from_numpy_dtype(np.dtype(f"{k}{b}")) for k in ("int", "uint") for b in (8, 16, 32, 64)}
    cols = {}
    for name, typ in ints.items():
        dt = np.dtype(typ.to_pandas_dtype())
        info = np.iinfo(dt)
        cols[name] = with_nulls(rng.integers(info.min, info.max, n, endpoint=True, dtype=dt).tolist(), typ, rng)
    cols["bool"] = with_nulls((rng.random(n) < 0.5).tolist(), pa.bool_(), rng)
    cols["float16"] = with_nulls(rng.standard_normal(n).astype(np.float16).tolist(), pa.float16(), rng)
    cols["float32"] = with_nulls(rng.standard_normal(n).astype(np.float32).tolist(), pa.float32(), rng)
    cols["float64"] = with_nulls(rng.standard_normal(n).tolist(), pa.float64(), rng)
    days = rng.integers(-20000, 20000, n).tolist()
    cols["date32"] = with_nulls(days, pa.date32(), rng)
    cols["date64"] = with_nulls([d * 86400000 for d in days], pa.date64(), rng)
    cols["time32_s"] = with_nulls(rng.integers(0, 86400, n).tolist(), pa.time32("s"), rng)
    cols["time32_ms"] = with_nulls(rng.integers(0, 86400000, n).tolist(), pa.time32("ms"), rng)
    cols["time64_us"] = with_nulls(rng.integers(0, 86400 * 10**6, n).tolist(), pa.time64("us"), rng)
    # Nanoseconds in whole microseconds: format 1.0 stores them as microseconds.
    cols["time64_ns"] = with_nulls((rng.integers(0, 86400 * 10**6, n) * 1000).tolist(), pa.time64("ns"), rng)
    for unit in ("s", "ms", "us", "ns"):
        v = (rng.integers(-(10**9), 10**9, n) * (1000 if unit == "ns" else 1)).tolist()
        cols[f"ts_{unit}"] = with_nulls(v, pa.timestamp(unit), rng)
        cols[f"ts_{unit}_utc"] = with_nulls(v, pa.timestamp(unit, tz="UTC"), rng)
    cols["duration_ms"] = with_nulls(rng.integers(-(10**9), 10**9, n).tolist(), pa.duration("ms"), rng)
    cols["ts_us_paris"] = with_nulls(rng.integers(0, 10**15, n).tolist(), pa.timestamp("us", tz="Europe/Paris"), rng)
    for p, s in ((5, 2), (9, 0), (18, 4), (38, 10)):
        unscaled = rng.integers(-(10 ** min(p, 18)) + 1, 10 ** min(p, 18), n).tolist()
        cols[f"dec_{p}_{s}"] = with_nulls([decimal.Decimal(u).scaleb(-s) for u in unscaled], pa.decimal128(p, s), rng)
    cols["dec256_50_5"] = with_nulls([decimal.Decimal(int(u) * 10**20 + 7).scaleb(-5) for u in rng.integers(-10**15, 10**15, n)],
                                     pa.decimal256(50, 5), rng)
    cols["fsb16"] = with_nulls([bytes(rng.integers(0, 256, 16, dtype=np.uint8)) for _ in range(n)], pa.binary(16), rng)
    words = ["", "a", "bé", "longer string ✓", "x" * 40]
    cols["string"] = with_nulls([words[i] for i in rng.integers(0, len(words), n)], pa.string(), rng)
    cols["large_string"] = with_nulls([words[i] for i in rng.integers(0, len(words), n)], pa.large_string(), rng)
    cols["binary"] = with_nulls([bytes(rng.integers(0, 256, int(k), dtype=np.uint8)) for k in rng.integers(0, 9, n)], pa.binary(), rng)
    cols["dict_string"] = pa.array([words[i] for i in rng.integers(0, len(words), n)]).dictionary_encode()
    cols["no_nulls_i64"] = pa.array(rng.integers(-100, 100, n))
    return pa.table(cols)


def nested_table(rng):
    n = N

    def maybe(v, frac=0.1):
        return None if rng.random() < frac else v

    def ints(k):
        return [int(x) for x in rng.integers(-1000, 1000, k)]

    cols = {
        "list_i32": pa.array([maybe([maybe(x) for x in ints(int(rng.integers(0, 4)))]) for _ in range(n)], pa.list_(pa.int32())),
        "list_str": pa.array([maybe([maybe(str(x)) for x in ints(int(rng.integers(0, 4)))]) for _ in range(n)], pa.list_(pa.string())),
        "list_list": pa.array([maybe([maybe(ints(int(rng.integers(0, 3)))) for _ in range(int(rng.integers(0, 3)))]) for _ in range(n)],
                              pa.list_(pa.list_(pa.int64()))),
        "struct": pa.array([maybe({"a": maybe(int(x)), "b": maybe(str(x)), "c": maybe({"d": maybe(float(x) / 3)})}) for x in ints(n)],
                           pa.struct([("a", pa.int32()), ("b", pa.string()), ("c", pa.struct([("d", pa.float64())]))])),
        "map": pa.array([maybe([(str(k), maybe(int(k))) for k in ints(int(rng.integers(0, 3)))]) for _ in range(n)],
                        pa.map_(pa.string(), pa.int64())),
        "list_struct": pa.array([maybe([maybe({"x": maybe(int(x))}) for x in ints(int(rng.integers(0, 3)))]) for _ in range(n)],
                                pa.list_(pa.struct([("x", pa.int32())]))),
        "struct_list": pa.array([maybe({"l": maybe(ints(int(rng.integers(0, 3))))}) for _ in range(n)],
                                pa.struct([("l", pa.list_(pa.int16()))])),
        "fsl_f32": pa.array([maybe([float(x) for x in ints(3)]) for _ in range(n)], pa.list_(pa.float32(), 3)),
        "list_dec": pa.array([maybe([decimal.Decimal(x).scaleb(-2) for x in ints(2)]) for _ in range(n)], pa.list_(pa.decimal128(7, 2))),
        "list_ts": pa.array([maybe(ints(2)) for _ in range(n)], pa.list_(pa.timestamp("ms", tz="UTC"))),
    }
    return pa.table(cols)


FLOATS = ["float32", "float64"]
INTS = ["int32", "int64", "uint32", "uint64"]
STRS = ["string", "binary"]

CASES = {
    # name: (table, write_table keyword arguments)
    "scalars": ("scalar", {}),
    "scalars_noschema": ("scalar", {"store_schema": False}),
    "scalars_int96": ("scalar", {"use_deprecated_int96_timestamps": True}),
    "scalars_int96_noschema": ("scalar", {"use_deprecated_int96_timestamps": True, "store_schema": False}),
    "scalars_dec_as_int": ("scalar", {"store_decimal_as_integer": True}),
    "scalars_dec_as_int_noschema": ("scalar", {"store_decimal_as_integer": True, "store_schema": False}),
    "scalars_v2": ("scalar", {"data_page_version": "2.0", "data_page_size": 512}),
    "scalars_plain": ("scalar", {"use_dictionary": False, "data_page_size": 512}),
    "scalars_gzip": ("scalar", {"compression": "gzip"}),
    "scalars_brotli": ("scalar", {"compression": "brotli"}),
    "scalars_zstd": ("scalar", {"compression": "zstd"}),
    "scalars_lz4raw": ("scalar_nodur", {"compression": "lz4"}),
    "scalars_none": ("scalar", {"compression": "none"}),
    "scalars_bss": ("scalar", {"use_dictionary": False, "column_encoding": {c: "BYTE_STREAM_SPLIT" for c in FLOATS + ["float16", "fsb16"] + INTS}}),
    "scalars_delta": ("scalar", {"use_dictionary": False, "column_encoding": {
        **{c: "DELTA_BINARY_PACKED" for c in INTS}, "string": "DELTA_LENGTH_BYTE_ARRAY", "binary": "DELTA_BYTE_ARRAY"}}),
    "scalars_nostats": ("scalar", {"write_statistics": False}),
    "scalars_format_v1": ("scalar", {"version": "1.0"}),
    "scalars_spark_flavor": ("scalar", {"flavor": "spark"}),
    "nested": ("nested", {}),
    "nested_noschema": ("nested", {"store_schema": False}),
    "nested_legacy_names": ("nested", {"use_compliant_nested_type": False, "store_schema": False}),
    "nested_v2": ("nested", {"data_page_version": "2.0", "data_page_size": 256, "compression": "zstd"}),
}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    print(f"seed {SEED} (MESHFEED_SEED)")
    root = tmp_path_factory.mktemp("types")
    tables = {"scalar": scalar_table(np.random.default_rng(SEED)), "nested": nested_table(np.random.default_rng(SEED + 1))}
    tables["scalar_nodur"] = tables["scalar"].drop_columns(["duration_ms"])
    other = root / "other"
    go = os.environ.get("GO") or shutil.which("go") or "go"
    subprocess.run([go, "run", "./testdata/otherwriters", "-out", str(other), "-seed", str(SEED)],
                   cwd=HERE.parent, check=True, capture_output=True)
    assert sorted(p.name for p in other.glob("*.parquet")) == sorted(OTHER_FILES + list(LEADING_EMPTY))
    (root / "nested_dur").mkdir()
    pq.write_table(pa.table({"s": pa.array([{"d": 1}, {"d": 2}], pa.struct([("d", pa.duration("s"))]))}),
                   root / "nested_dur" / "f.parquet")
    (root / "nested_int96").mkdir()
    ts = pa.array([{"t": 1}, {"t": 2}], pa.struct([("t", pa.timestamp("ns"))]))
    pq.write_table(pa.table({"s": ts, "l": pa.array([[1], [2, 3]], pa.list_(pa.timestamp("ns"))), "top": pa.array([1, 2], pa.timestamp("ns"))}),
                   root / "nested_int96" / "f.parquet", use_deprecated_int96_timestamps=True, store_schema=False)
    (root / "lz4dur").mkdir()
    pq.write_table(tables["scalar"].select(["duration_ms"]), root / "lz4dur" / "f.parquet", compression="lz4")
    for name, (table, kw) in CASES.items():
        (root / name).mkdir()
        pq.write_table(tables[table], root / name / "f.parquet", row_group_size=100, **kw)
    srv = Server("--addr", "unix://" + str(root / "s.sock"), base=("--backend", "pipeline", "--allow", str(root)))
    try:
        yield root, flight.FlightClient(srv.location, generic_options=[("grpc.max_receive_message_length", MAX_MSG)])
    finally:
        srv.stop()


def request(path, rows, columns=None):
    req = {"version": 1, "datasets": [str(path)], "global_batch_size": rows, "num_slices": 1, "slices": [0],
           "last_batch": "pad", "epochs": 1}
    if columns is not None:
        req["columns"] = [{"name": c} for c in columns]
    return json.dumps(req).encode()


def delivered(t):
    """The type meshfeed delivers for pyarrow's type t: the same, except the
    documented normalizations (docs/TYPES.md): no dictionaries (the value
    type), no large offsets (string, binary, list), list elements named
    "item"."""
    if pa.types.is_dictionary(t):
        return delivered(t.value_type)
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_fixed_size_list(t):
        return pa.list_(pa.field("item", delivered(t.value_type), t.value_field.nullable), t.list_size)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(pa.field("item", delivered(t.value_type), t.value_field.nullable))
    if pa.types.is_map(t):
        return pa.map_(delivered(t.key_type), pa.field(t.item_field.name, delivered(t.item_type), t.item_field.nullable))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, delivered(f.type), f.nullable) for f in t])
    return t


def relaxed(t):
    """t with every list element nullable: a column without nulls may come
    with non-nullable elements (the stronger promise)."""
    if pa.types.is_fixed_size_list(t):
        return pa.list_(pa.field("item", relaxed(t.value_type)), t.list_size)
    if pa.types.is_list(t):
        return pa.list_(pa.field("item", relaxed(t.value_type)))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, relaxed(f.type), f.nullable) for f in t])
    return t


def compare(client, path, want_path=None):
    """Reads path over Flight (all columns, one padded step) and compares it
    with pyarrow's read of path (or of want_path)."""
    want = pq.read_table(want_path or path)
    info = client.get_flight_info(flight.FlightDescriptor.for_command(request(path, want.num_rows)))
    got = client.do_get(info.endpoints[0].ticket).read_all()
    assert got.column_names == want.column_names + ["valid"]
    assert got.column("valid").to_pylist() == [True] * want.num_rows
    bad = []
    for name in want.column_names:
        w, g = want.column(name), got.column(name)
        planned = info.schema.field(name).type
        if g.type != planned or relaxed(g.type) != relaxed(delivered(w.type)):
            bad.append(f"{name}: type {g.type} (planned {planned}), pyarrow {w.type}")
            continue
        w = w.cast(g.type)
        if not g.combine_chunks().equals(w.combine_chunks()):
            bad.append(f"{name}: values differ: {g.to_pylist()[:8]} vs {w.to_pylist()[:8]}")
        elif g.null_count != w.null_count:
            bad.append(f"{name}: {g.null_count} nulls, pyarrow {w.null_count}")
    return bad


@pytest.mark.parametrize("case", sorted(CASES))
def test_pyarrow_written(served, case):
    root, client = served
    bad = compare(client, root / case / "f.parquet")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("store_schema", [True, False])
def test_uuid_and_json(served, store_schema):
    """The canonical extensions pyarrow reads back from Parquet (arrow.uuid
    over FIXED_LEN_BYTE_ARRAY(16), arrow.json over a JSON-annotated string)
    arrive as the same extension types and values."""
    root, client = served
    d = root / f"uuid_json_{store_schema}"
    d.mkdir(exist_ok=True)
    rng = np.random.default_rng(SEED)
    t = pa.table({"u": pa.array([bytes(rng.integers(0, 256, 16, dtype=np.uint8)) for _ in range(N)], pa.uuid()),
                  "j": pa.array([json.dumps({"k": int(i)}) for i in range(N)], pa.json_())})
    pq.write_table(t, d / "f.parquet", store_schema=store_schema)
    bad = compare(client, d / "f.parquet")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("name", OTHER_FILES)
def test_other_writers(served, name):
    root, client = served
    bad = compare(client, root / "other" / name)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("name", sorted(LEADING_EMPTY))
def test_leading_empty_pages(served, name):
    """A data page of 0 values and 0 rows before the first of each column
    chunk: pyarrow 26 reads no row of such a chunk (Arrow C++, and arrow-go,
    take the page for the chunk's end); meshfeed reads every row, the values
    pyarrow reads of the twin file without that page."""
    root, client = served
    path, twin = root / "other" / name, root / "other" / LEADING_EMPTY[name]
    rows = pq.read_table(twin).num_rows
    assert pq.ParquetFile(path).metadata.num_rows == rows > 0 and pq.read_table(path).num_rows in (0, rows)
    bad = compare(client, path, want_path=twin)
    assert not bad, "\n".join(bad)


def test_nulls_metadata(served):
    """GetFlightInfo says which columns hold nulls (the footers' counts) before a page is read."""
    root, client = served
    path = root / "scalars" / "f.parquet"
    info = client.get_flight_info(flight.FlightDescriptor.for_command(request(path, N, ["int32", "no_nulls_i64"])))
    f = info.schema.field("int32")
    want = pq.read_table(path, columns=["int32"]).column(0).null_count
    assert f.nullable and f.metadata[b"meshfeed.null_count"] == str(want).encode()
    assert b"meshfeed.null_count" not in (info.schema.field("no_nulls_i64").metadata or {})
    nostats = root / "scalars_nostats" / "f.parquet"
    info = client.get_flight_info(flight.FlightDescriptor.for_command(request(nostats, N, ["int32"])))
    assert info.schema.field("int32").metadata[b"meshfeed.null_count"] == b"unknown"


def test_refused_at_plan_time(served):
    """What meshfeed cannot deliver exactly is refused by GetFlightInfo, naming file, column and type."""
    root, client = served
    path = root / "lz4dur" / "f.parquet"
    with pytest.raises(pa.ArrowInvalid, match=f'{path}.*"duration_ms".*duration.*LZ4_RAW.*rewrite'):
        client.get_flight_info(flight.FlightDescriptor.for_command(request(path, N)))
    path = root / "nested_dur" / "f.parquet"
    with pytest.raises(pa.ArrowInvalid, match=f'{path}.*"s".*struct<d: duration.*duration inside a nested type'):
        client.get_flight_info(flight.FlightDescriptor.for_command(request(path, 2)))
    # INT96 inside a struct or a list: arrow-go would label it UTC, pyarrow
    # reads timestamp[ns] without a zone; refused, the top-level one served.
    path = root / "nested_int96" / "f.parquet"
    for col in ("s", "l"):
        with pytest.raises(pa.ArrowInvalid, match=f'{path}.*"{col}".*INT96 inside a nested type'):
            client.get_flight_info(flight.FlightDescriptor.for_command(request(path, 2, [col])))
    info = client.get_flight_info(flight.FlightDescriptor.for_command(request(path, 2, ["top"])))
    assert info.schema.field("top").type == pq.read_table(path).schema.field("top").type == pa.timestamp("ns")


@pytest.mark.parametrize("store_schema", [True, False])
def test_nested_json_refused_at_plan_time(served, store_schema):
    """JSON inside a struct, a list or a map: arrow-go would read it as binary,
    pyarrow reads arrow.json; refused by GetFlightInfo naming the file, the
    column, the Parquet type and what to do. The top-level JSON column is
    served as pyarrow reads it."""
    root, client = served
    d = root / f"nested_json_{store_schema}"
    d.mkdir(exist_ok=True)
    path = d / "f.parquet"
    j = pa.array(['{"a": 1}', "[2]", None], pa.json_())
    t = pa.table({
        "s": pa.StructArray.from_arrays([j], names=["j"]),
        "l": pa.ListArray.from_arrays(pa.array([0, 1, 3, 3], pa.int32()), j),
        "m": pa.MapArray.from_arrays(pa.array([0, 2, 2, 2], pa.int32()), pa.array(["k", "q"]), j.slice(0, 2)),
        "top": j,
    })
    pq.write_table(t, path, store_schema=store_schema)
    want = {"s": "s.j", "l": "l.list.element", "m": "m.key_value.value"}
    for col, leaf in want.items():
        with pytest.raises(pa.ArrowInvalid) as e:
            client.get_flight_info(flight.FlightDescriptor.for_command(request(path, 3, [col])))
        msg = str(e.value)
        for part in (str(path), f'column "{col}"', f"Parquet JSON inside a nested type (leaf {leaf})", "arrow.json",
                     "rewrite it as a plain string, or project top-level JSON columns only"):
            assert part in msg, f"{part!r} not in {msg!r}"
    info = client.get_flight_info(flight.FlightDescriptor.for_command(request(path, 3, ["top"])))
    assert info.schema.field("top").type == pq.read_table(path).schema.field("top").type == pa.json_()


# ---------------------------------------------------------------------------
# docs/TYPES.md: the table of what each Parquet type becomes, generated from
# what this test observes; the test fails when the checked-in table differs
# (MESHFEED_UPDATE_DOCS=1 rewrites it).

DOC = HERE.parent / "docs" / "TYPES.md"
BEGIN, END = "<!-- BEGIN GENERATED TABLE (testdata/test_flight_types.py) -->", "<!-- END GENERATED TABLE -->"
DOC_CASES = ["scalars_noschema", "scalars", "scalars_int96_noschema", "scalars_dec_as_int_noschema", "nested_noschema", "nested",
             "nested_legacy_names"]


def parquet_description(pf, name):
    """The Parquet physical and logical type of top-level column name."""
    leaves = [pf.schema.column(i) for i in range(len(pf.schema)) if pf.schema.column(i).path.split(".")[0] == name]
    if len(leaves) == 1 and leaves[0].max_repetition_level == 0:
        c = leaves[0]
        phys = c.physical_type + (f"({c.length})" if c.physical_type == "FIXED_LEN_BYTE_ARRAY" else "")
        lt = str(c.logical_type)
        if lt == "None" and c.converted_type != "NONE":
            lt = f"converted {c.converted_type}"
        return phys if lt == "None" else f"{phys} {lt}"
    node = pf.schema_arrow.field(name).type
    kind = "map" if pa.types.is_map(node) else "struct" if pa.types.is_struct(node) else "list"
    leafs = ", ".join(f"{c.path}: {c.physical_type}" for c in leaves)
    return f"{kind} group ({leafs})"


def jax_description(field):
    from meshfeed._src.arrowtypes import flatten_schema
    from meshfeed._src.layout import column_spec

    leaves = list(flatten_schema(pa.schema([field])))
    parts = []
    for f in leaves:
        s = column_spec(f)
        if s.kind == "arrow":
            form = "pyarrow array"
        else:
            dt = "bool" if s.kind == "bool" else np.dtype(s.dtype).name
            form = f"jax.Array {dt}" + (f" [B, {', '.join(map(str, s.trailing))}]" if s.trailing else " [B]")
        parts.append(form if len(leaves) == 1 else f"`{f.name}`: {form}")
    return "; ".join(parts)


def types_table(root, client):
    rows, where = [], {}
    files = [(case, root / case / "f.parquet") for case in DOC_CASES] + [(f"other/{n}", root / "other" / n) for n in OTHER_FILES]
    for case, path in files:
        pf = pq.ParquetFile(path)
        info = client.get_flight_info(flight.FlightDescriptor.for_command(request(path, pf.metadata.num_rows)))
        stored = b"ARROW:schema" in (pf.metadata.metadata or {})
        for field in info.schema:
            if field.name == "valid":
                continue
            row = (parquet_description(pf, field.name), str(field.type), jax_description(field))
            if row not in where:
                rows.append(row)
                where[row] = ({stored}, f"{case}: {field.name}")
            else:
                where[row][0].add(stored)
    lines = ["| Parquet type | Flight delivers | JAX client delivers | ARROW:schema | example (file: column) |",
             "|---|---|---|---|---|"]
    for r in rows:
        flags, example = where[r]
        stored = "either" if len(flags) == 2 else "with" if True in flags else "without"
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in (*r, stored, example)) + " |")
    return "\n".join(lines)


def test_types_doc(served):
    root, client = served
    table = types_table(root, client)
    text = DOC.read_text(encoding="utf-8")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    want = f"{head}{BEGIN}\n{table}\n{END}{tail}"
    if os.environ.get("MESHFEED_UPDATE_DOCS") == "1":
        DOC.write_text(want, encoding="utf-8")
        return
    assert text == want, "docs/TYPES.md is out of date: run MESHFEED_UPDATE_DOCS=1 pytest testdata/test_flight_types.py"


@pytest.mark.parametrize("page_version", ["1.0", "2.0"])
def test_list_null_elements(served, page_version):
    """Lists of numbers with null elements ([[1, None, 3]]) beside empty and
    null lists arrive over Flight as pyarrow reads them (Arrow nulls in the
    elements' validity), data pages v1 and v2; the planned field's
    meshfeed.null_count counts null lists and null elements, not empty lists
    (the statistics' null count holds all three; the definition level
    histograms tell them apart)."""
    root, client = served
    d = root / f"list_null_elements_{page_version}"
    d.mkdir(exist_ok=True)
    rng = np.random.default_rng(SEED)
    rows = []
    for i in range(N):
        k = rng.integers(0, 10)
        rows.append(None if k == 0 and i else [] if k == 1 else
                    [None if rng.random() < 0.25 or (i == 0 and j == 0) else int(rng.integers(-50, 50)) for j in range(int(rng.integers(1, 5)))])
    t = pa.table({"l": pa.array(rows, pa.list_(pa.int32())), "l64": pa.array(rows, pa.list_(pa.float64()))})
    path = d / "f.parquet"
    pq.write_table(t, path, row_group_size=100, data_page_version=page_version, data_page_size=256, use_dictionary=False)
    bad = compare(client, path)
    assert not bad, "\n".join(bad)
    info = client.get_flight_info(flight.FlightDescriptor.for_command(request(path, N, ["l"])))
    want = sum(r is None for r in rows) + sum(x is None for r in rows if r for x in r)
    assert info.schema.field("l").metadata[b"meshfeed.null_count"] == str(want).encode()
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).statistics.null_count > 0
