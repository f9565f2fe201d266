"""Write small Parquet and Arrow IPC files with pyarrow, for the Go decoder.

The Go loader must read files that our own writer (arrow-go, internal/datagen)
did not make. This script writes one small file per case into testdata/pyarrow/:
every physical/logical type we support, dictionary pages, every codec, uneven row
groups, nulls, data page v1 and v2, schema mismatches, an empty file, Arrow IPC
(Feather v2) files, and deliberately broken files. Beside every good file it
writes <name>.expect.json with the schema, the row counts per row group (or
record batch) and every value, encoded so that comparison is exact:

    int*/uint*      JSON integers
    bool            true / false
    float16/32/64   the IEEE bit pattern as an unsigned integer ("f16_bits", ...)
    string          the string
    binary          lowercase hex
    null            null
    lists, fixed-size lists, fixed_shape_tensor: a JSON list per row of the
                    element encoding (a tensor row is its row-major flattening)

MANIFEST.json lists every file with its purpose (good/bad, what it covers).

Usage (only when the files are to be regenerated; the pytest in
test_pyarrow_files.py checks that the checked-in expectations are what this
script produces):

    .venv/bin/python testdata/make_pyarrow_files.py [--out testdata/pyarrow]

Values come from numpy generators with fixed seeds; the output does not depend
on the clock or the machine.
"""

import argparse
import json
import os
import pathlib
import shutil
import struct
import sys

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq

HERE = pathlib.Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "pyarrow"

# pyarrow names LZ4_RAW "LZ4" (Arrow's LZ4 is the raw block format) and the
# deprecated Hadoop-framed codec "LZ4_HADOOP"; expectations use the Parquet
# thrift names.
THRIFT_CODEC = {"LZ4": "LZ4_RAW", "LZ4_HADOOP": "LZ4"}

N = 200  # rows of a type case


# ---------------------------------------------------------------------------
# Values


def rng(seed):
    return np.random.default_rng(seed)


def special_floats(dtype):
    return np.array([0.0, -0.0, 1.0, -1.5, np.inf, -np.inf, np.nan], dtype=dtype)


def float_column(dtype, seed, n=N):
    vals = rng(seed).standard_normal(n).astype(dtype)
    sp = special_floats(dtype)
    vals[: len(sp)] = sp
    return vals


def int_column(dtype, seed, n=N):
    info = np.iinfo(dtype)
    vals = rng(seed).integers(info.min, info.max, size=n, dtype=dtype, endpoint=True)
    vals[:3] = [info.min, info.max, 0]
    return vals


def tensor_type():
    return pa.fixed_shape_tensor(pa.uint8(), [2, 3])


def tensor_array(n, seed):
    vals = rng(seed).integers(0, 256, size=n * 6, dtype=np.uint8)
    storage = pa.FixedSizeListArray.from_arrays(pa.array(vals), 6)
    return pa.ExtensionArray.from_storage(tensor_type(), storage)


def fsl_array(n, seed):
    vals = float_column(np.float32, seed, n * 4)
    return pa.FixedSizeListArray.from_arrays(pa.array(vals), 4)


def list_int32_array(n, seed):
    r = rng(seed)
    lens = r.integers(0, 6, size=n)
    lens[:2] = 0  # empty lists first, and more throughout
    return pa.array([list(r.integers(-(2**31), 2**31 - 1, size=k, dtype=np.int32, endpoint=True)) for k in lens], pa.list_(pa.int32()))


def string_array(n, seed):
    r = rng(seed)
    alphabet = list("abcdefghijklmnopqrstuvwxyz") + ["é", "ß", "字", "🙂", " "]
    out = []
    for i in range(n):
        k = int(r.integers(0, 12))
        out.append("".join(r.choice(alphabet, size=k)))
    return pa.array(out, pa.string())


def binary_array(n, seed):
    r = rng(seed)
    return pa.array([r.integers(0, 256, size=int(r.integers(0, 10)), dtype=np.uint8).tobytes() for _ in range(n)], pa.binary())


TYPE_CASES = {
    # name: (column builder(n, seed))
    "bool": lambda n, s: pa.array(rng(s).integers(0, 2, size=n).astype(bool)),
    "int8": lambda n, s: pa.array(int_column(np.int8, s, n)),
    "int16": lambda n, s: pa.array(int_column(np.int16, s, n)),
    "int32": lambda n, s: pa.array(int_column(np.int32, s, n)),
    "int64": lambda n, s: pa.array(int_column(np.int64, s, n)),
    "uint8": lambda n, s: pa.array(int_column(np.uint8, s, n)),
    "uint16": lambda n, s: pa.array(int_column(np.uint16, s, n)),
    "uint32": lambda n, s: pa.array(int_column(np.uint32, s, n)),
    "uint64": lambda n, s: pa.array(int_column(np.uint64, s, n)),
    "float16": lambda n, s: pa.array(float_column(np.float16, s, n)),
    "float32": lambda n, s: pa.array(float_column(np.float32, s, n)),
    "float64": lambda n, s: pa.array(float_column(np.float64, s, n)),
    "fixed_size_list_float32": fsl_array,
    "fixed_shape_tensor_uint8": tensor_array,
    "list_int32": list_int32_array,
    "string": string_array,
    "binary": binary_array,
}


def all_types_table(n, seed):
    return pa.table({name: build(n, seed + i) for i, (name, build) in enumerate(TYPE_CASES.items())})


# ---------------------------------------------------------------------------
# Expectations


def encode_values(typ, arr):
    """The exact JSON encoding of a (chunked) array's values; see the module doc."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks else pa.array([], typ)
    if isinstance(typ, pa.BaseExtensionType):
        storage = arr.storage
        return encode_values(typ.storage_type, storage)
    if pa.types.is_dictionary(typ):
        return encode_values(typ.value_type, arr.dictionary_decode())
    if pa.types.is_list(typ) or pa.types.is_fixed_size_list(typ) or pa.types.is_large_list(typ):
        out = []
        for i in range(len(arr)):
            if not arr[i].is_valid:
                out.append(None)
            else:
                out.append(encode_values(typ.value_type, arr[i].values))
        return out
    valid = arr.is_valid().to_pylist()
    if pa.types.is_floating(typ):
        bits = {16: np.uint16, 32: np.uint32, 64: np.uint64}[typ.bit_width]
        np_vals = arr.fill_null(0).to_numpy(zero_copy_only=False).view(bits)
        return [int(b) if v else None for b, v in zip(np_vals, valid)]
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        return [x.hex() if x is not None else None for x in arr.to_pylist()]
    return arr.to_pylist()


def value_encoding(typ):
    """How encode_values writes the leaf values of typ."""
    while True:
        if isinstance(typ, pa.BaseExtensionType):
            typ = typ.storage_type
        elif pa.types.is_dictionary(typ):
            typ = typ.value_type
        elif pa.types.is_list(typ) or pa.types.is_fixed_size_list(typ) or pa.types.is_large_list(typ):
            typ = typ.value_type
        else:
            break
    if pa.types.is_floating(typ):
        return f"f{typ.bit_width}_bits"
    if pa.types.is_binary(typ):
        return "hex"
    if pa.types.is_string(typ):
        return "string"
    if pa.types.is_boolean(typ):
        return "bool"
    return "int"


def describe_schema(schema):
    out = []
    for f in schema:
        d = {"name": f.name, "type": str(f.type), "nullable": f.nullable}
        if isinstance(f.type, pa.BaseExtensionType):
            d["extension_name"] = f.type.extension_name
            d["storage_type"] = str(f.type.storage_type)
            if isinstance(f.type, pa.FixedShapeTensorType):
                d["shape"] = list(f.type.shape)
        out.append(d)
    return out


def expect_parquet(path):
    """The expectation of a Parquet file, read back with pyarrow."""
    pf = pq.ParquetFile(path)
    md = pf.metadata
    table = pf.read()
    row_groups = []
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        cols = []
        for c in range(rg.num_columns):
            cc = rg.column(c)
            cols.append(
                {
                    "path": cc.path_in_schema,
                    "physical_type": cc.physical_type,
                    "codec": THRIFT_CODEC.get(cc.compression, cc.compression),
                    "dictionary_page": bool(cc.has_dictionary_page),
                }
            )
        row_groups.append({"rows": rg.num_rows, "columns": cols})
    return {
        "format": "parquet",
        "schema": describe_schema(table.schema),
        "num_rows": table.num_rows,
        "row_groups": row_groups,
        "columns": [
            {"name": f.name, "encoding": value_encoding(f.type), "values": encode_values(f.type, table.column(i))}
            for i, f in enumerate(table.schema)
        ],
    }


def expect_arrow(path):
    """The expectation of an Arrow IPC file, read back with pyarrow."""
    with pa.memory_map(str(path)) as source:
        reader = pa.ipc.open_file(source)
        batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
        schema = reader.schema
    table = pa.Table.from_batches(batches, schema=schema)
    return {
        "format": "arrow",
        "schema": describe_schema(schema),
        "num_rows": table.num_rows,
        "record_batches": [b.num_rows for b in batches],
        "columns": [
            {"name": f.name, "encoding": value_encoding(f.type), "values": encode_values(f.type, table.column(i))}
            for i, f in enumerate(schema)
        ],
    }


def expect_for(path):
    return expect_arrow(path) if path.suffix == ".arrow" else expect_parquet(path)


def dump_json(obj):
    return json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


# ---------------------------------------------------------------------------
# Cases


def good_cases():
    """Yields (file name, writer(path), what it covers)."""
    for i, (name, build) in enumerate(TYPE_CASES.items()):
        table = pa.table({name: build(N, 100 + i)})
        yield (
            f"type_{name}.parquet",
            lambda p, t=table: pq.write_table(t, p, compression="snappy", use_dictionary=False),
            f"type {table.schema.field(0).type}, snappy, plain encoding",
        )

    dict_table = pa.table(
        {
            "small_int": pa.array(rng(1).integers(0, 5, size=N).astype(np.int32)),
            "city": pa.array(rng(2).choice(["Oslo", "Lima", "Pune", "Kyiv"], size=N)),
            "id": pa.array(np.arange(N, dtype=np.int64)),
        }
    )
    yield (
        "dictionary.parquet",
        lambda p: pq.write_table(dict_table, p, use_dictionary=["small_int", "city"], compression="none"),
        "dictionary-encoded pages (RLE_DICTIONARY) on a low-cardinality int32 and string column; id stays plain",
    )

    codec_table = pa.table(
        {
            "id": pa.array(np.arange(N, dtype=np.int64)),
            "x": pa.array(float_column(np.float32, 3)),
            "features": fsl_array(N, 4),
            "tokens": list_int32_array(N, 5),
            "name": string_array(N, 6),
        }
    )
    for codec in ["none", "snappy", "zstd", "gzip", "lz4"]:
        yield (
            f"codec_{codec}.parquet",
            lambda p, c=codec: pq.write_table(codec_table, p, compression=c, use_dictionary=False),
            f"compression {codec}" + (" (pyarrow 'lz4' = Parquet LZ4_RAW)" if codec == "lz4" else ""),
        )

    def write_uneven(p):
        t = pa.table({"id": pa.array(np.arange(388, dtype=np.int64)), "features": fsl_array(388, 7)})
        with pq.ParquetWriter(p, t.schema, compression="snappy") as w:
            off = 0
            for size in [100, 37, 250, 1]:
                w.write_table(t.slice(off, size), row_group_size=size)
                off += size

    yield ("row_groups_uneven.parquet", write_uneven, "four row groups of 100, 37, 250 and 1 rows")

    def nullable_table():
        r = rng(8)
        vals = r.integers(-1000, 1000, size=N).astype(np.int32)
        mask = r.random(N) < 0.2
        mask[0] = True
        return pa.table(
            {
                "id": pa.array(np.arange(N, dtype=np.int64)),
                "maybe": pa.array(vals, mask=mask),
                "never_null": pa.array(vals),  # nullable type, no nulls
            }
        )

    nt = nullable_table()
    yield (
        "nulls.parquet",
        lambda p: pq.write_table(nt, p, compression="none", use_dictionary=False),
        "nullable int32 column with nulls (the null-without-fill error) and a nullable column without nulls",
    )

    pages_table = pa.table(
        {
            "id": pa.array(np.arange(1000, dtype=np.int64)),
            "x": pa.array(float_column(np.float64, 9, 1000)),
            "name": string_array(1000, 10),
            "tokens": list_int32_array(1000, 11),
            # Runs of 13 equal booleans: data page v2 encodes booleans as RLE
            # runs, which parquet-go v0.32 decodes wrongly (the loader falls
            # back to arrow-go for them).
            "flag": pa.array((np.arange(1000) // 13) % 2 == 0),
        }
    )
    for version in ["1.0", "2.0"]:
        yield (
            f"page_v{version[0]}.parquet",
            lambda p, v=version: pq.write_table(
                pages_table, p, data_page_version=v, data_page_size=1024, compression="snappy", use_dictionary=False
            ),
            f"data page v{version[0]} (DATA_PAGE{'_V2' if version == '2.0' else ''}), several pages per column chunk",
        )

    # pyarrow's defaults for a list column (v1 pages, no page index), no
    # empty list: the loader streams it in pieces, locating its pages by
    # their repetition levels.
    lens = rng(13).integers(1, 41, size=300)
    vals = rng(14).integers(0, 1000, size=int(lens.sum()), dtype=np.int32)
    starts = np.concatenate([[0], np.cumsum(lens)])
    list_table = pa.table({"tokens": pa.ListArray.from_arrays(pa.array(starts.astype(np.int32)), pa.array(vals))})
    yield (
        "list_v1_pages.parquet",
        lambda p: pq.write_table(list_table, p, row_group_size=150, data_page_size=1024, compression="snappy", use_dictionary=False),
        "list<int32> of 1 to 40 values (no empty list) in v1 pages of 1 KiB, no page index (pyarrow's defaults), snappy, row groups of 150",
    )

    ids = pa.array(np.arange(50, dtype=np.int64))
    labels = rng(12).integers(0, 10, size=50)
    mismatch_a = pa.table({"id": ids, "label": pa.array(labels.astype(np.int32))})
    mismatch_b = pa.table({"id": ids, "label": pa.array(labels.astype(np.int64))})
    mismatch_order = pa.table({"label": pa.array(labels.astype(np.int32)), "id": ids})
    yield ("mismatch_a.parquet", lambda p: pq.write_table(mismatch_a, p), "schema mismatch: id int64, label int32")
    yield ("mismatch_b.parquet", lambda p: pq.write_table(mismatch_b, p), "schema mismatch: id int64, label int64 (vs mismatch_a)")
    yield (
        "mismatch_order.parquet",
        lambda p: pq.write_table(mismatch_order, p),
        "schema mismatch: mismatch_a's columns in the other order (label int32, id int64)",
    )

    empty = pa.table({"id": pa.array([], pa.int64()), "features": pa.array([], pa.list_(pa.float32(), 4))})
    yield ("empty.parquet", lambda p: pq.write_table(empty, p), "zero rows, valid schema (id int64, features fixed_size_list<float32>[4])")

    at = all_types_table(64, 200)
    yield ("all_types.parquet", lambda p: pq.write_table(at, p, compression="zstd"), "every type case in one file, zstd")
    # Feather v2 is the Arrow IPC file format; chunksize makes several record batches.
    yield (
        "all_types.arrow",
        lambda p: feather.write_feather(at, p, compression="uncompressed", chunksize=40),
        "Arrow IPC file (Feather v2), uncompressed, every type case, record batches of 40 and 24 rows",
    )
    yield (
        "all_types_zstd.arrow",
        lambda p: feather.write_feather(at, p, compression="zstd", chunksize=40),
        "Arrow IPC file (Feather v2), zstd body compression, every type case",
    )


def flip(data, start, n):
    for i in range(start, min(start + n, len(data))):
        data[i] ^= 0xFF


def bad_cases():
    """Yields (file name, bytes builder(good bytes of its source), source case, what is wrong)."""

    def truncated(b):
        return b[: len(b) // 2]

    def corrupt_footer(b):
        b = bytearray(b)
        footer_len = struct.unpack("<I", bytes(b[-8:-4]))[0]
        footer_start = len(b) - 8 - footer_len
        # Garble the start of the thrift FileMetaData (version, schema) and its middle.
        flip(b, footer_start, 8)
        flip(b, footer_start + footer_len // 2, 8)
        return bytes(b)

    def bad_magic(b):
        return b"PAR0" + b[4:-4] + b"PAR0"

    def zero(_):
        return b""

    def corrupt_page(b):
        # Garble the header of the first data page of the second column chunk:
        # the footer (and the first column) stay intact.
        b = bytearray(b)
        md = pq.ParquetFile(pa.BufferReader(bytes(b))).metadata
        off = md.row_group(0).column(1).data_page_offset
        for i in range(off, off + 8):
            b[i] = 0xFF
        return bytes(b)

    yield ("bad_truncated.parquet", truncated, "codec_none.parquet", "the first half of codec_none.parquet: no footer")
    yield ("bad_footer.parquet", corrupt_footer, "codec_none.parquet", "codec_none.parquet with bytes of the thrift footer flipped")
    yield ("bad_magic.parquet", bad_magic, "codec_none.parquet", "codec_none.parquet with PAR0 instead of PAR1 at both ends")
    yield ("bad_empty_bytes.parquet", zero, "codec_none.parquet", "a file of zero bytes")
    yield (
        "bad_data_page.parquet",
        corrupt_page,
        "codec_none.parquet",
        "codec_none.parquet (uncompressed) with the page header of column 'x' overwritten by 0xFF; footer intact",
    )


def pyarrow_rejects(path):
    try:
        pq.read_table(path)
    except Exception as e:  # noqa: BLE001 - any failure is what we want
        return type(e).__name__
    return None


def generate(out):
    out = pathlib.Path(out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    manifest = {"generator": "testdata/make_pyarrow_files.py", "files": []}
    for name, write, covers in good_cases():
        path = out / name
        write(str(path))
        expect = expect_for(path)
        expect["file"] = name
        (out / (name + ".expect.json")).write_text(dump_json(expect), encoding="utf-8")
        manifest["files"].append({"name": name, "kind": "good", "covers": covers, "expect": name + ".expect.json"})
    for name, build, source, covers in bad_cases():
        path = out / name
        path.write_bytes(build((out / source).read_bytes()))
        err = pyarrow_rejects(path)
        if err is None:
            raise SystemExit(f"{name}: pyarrow reads it without error; the corruption is not detectable")
        manifest["files"].append({"name": name, "kind": "bad", "covers": covers, "source": source, "pyarrow_error": err})
    (out / "MANIFEST.json").write_text(dump_json(manifest), encoding="utf-8")
    return manifest


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="output directory (replaced)")
    args = ap.parse_args(argv)
    m = generate(args.out)
    total = sum(f.stat().st_size for f in pathlib.Path(args.out).iterdir())
    print(f"wrote {len(m['files'])} files and their expectations to {args.out} ({total} bytes)")


if __name__ == "__main__":
    sys.exit(main())
