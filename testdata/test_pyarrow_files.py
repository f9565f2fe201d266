"""The checked-in pyarrow test files agree with their generator and their expectations.

pyarrow's output bytes may change between versions, so the generator's output is
compared by expectation (schema, row groups, values), not byte for byte. Each
checked-in good file must also read back, with pyarrow, as its expect.json says;
each bad file must be rejected.
"""

import importlib.util
import json
import pathlib

import pyarrow as pa
import pytest

HERE = pathlib.Path(__file__).resolve().parent
FILES = HERE / "pyarrow"
REGENERATE = ".venv/bin/python testdata/make_pyarrow_files.py"

_spec = importlib.util.spec_from_file_location("make_pyarrow_files", HERE / "make_pyarrow_files.py")
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)

MANIFEST = json.loads((FILES / "MANIFEST.json").read_text(encoding="utf-8"))
GOOD = [f["name"] for f in MANIFEST["files"] if f["kind"] == "good"]
BAD = [f["name"] for f in MANIFEST["files"] if f["kind"] == "bad"]


def load(path):
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    out = tmp_path_factory.mktemp("pyarrow")
    gen.generate(out)
    return out


def test_generator_reproduces_checked_in_expectations(regenerated):
    got = sorted(p.name for p in regenerated.iterdir())
    want = sorted(p.name for p in FILES.iterdir())
    assert got == want, f"file sets differ; regenerate with: {REGENERATE}"
    differing = [
        p.name
        for p in sorted(regenerated.iterdir())
        if p.name.endswith(".json") and load(p) != load(FILES / p.name)
    ]
    assert not differing, f"stale or nondeterministic: {differing}; regenerate with: {REGENERATE}"


def test_generator_is_deterministic(regenerated, tmp_path):
    gen.generate(tmp_path)
    for p in regenerated.iterdir():
        if p.name.endswith(".json"):
            assert load(p) == load(tmp_path / p.name), p.name


@pytest.mark.parametrize("name", GOOD)
def test_checked_in_file_matches_expectation(name):
    got = gen.expect_for(FILES / name)
    got["file"] = name
    assert got == load(FILES / (name + ".expect.json"))


@pytest.mark.parametrize("name", BAD)
def test_bad_file_is_rejected(name):
    assert gen.pyarrow_rejects(FILES / name) is not None, f"pyarrow reads {name}"


def test_manifest_covers_the_spec():
    names = {f["name"] for f in MANIFEST["files"]}
    on_disk = {p.name for p in FILES.iterdir() if not p.name.endswith(".json")}
    assert names == on_disk
    for f in MANIFEST["files"]:
        assert f["covers"], f
        if f["kind"] == "good":
            assert (FILES / f["expect"]).exists(), f
    for want in [
        "type_bool.parquet", "type_int8.parquet", "type_int16.parquet", "type_int32.parquet",
        "type_int64.parquet", "type_uint8.parquet", "type_uint16.parquet", "type_uint32.parquet",
        "type_uint64.parquet", "type_float16.parquet", "type_float32.parquet", "type_float64.parquet",
        "type_fixed_size_list_float32.parquet", "type_fixed_shape_tensor_uint8.parquet",
        "type_list_int32.parquet", "type_string.parquet", "type_binary.parquet",
        "dictionary.parquet", "codec_snappy.parquet", "codec_zstd.parquet", "codec_gzip.parquet",
        "codec_lz4.parquet", "codec_none.parquet", "row_groups_uneven.parquet", "nulls.parquet",
        "page_v1.parquet", "page_v2.parquet", "mismatch_a.parquet", "mismatch_b.parquet",
        "empty.parquet", "all_types.arrow", "all_types_zstd.arrow",
        "bad_truncated.parquet", "bad_footer.parquet", "bad_magic.parquet",
        "bad_empty_bytes.parquet", "bad_data_page.parquet",
    ]:
        assert want in names, want


def test_expectations_say_what_the_cases_cover():
    codecs = {
        n: {c["codec"] for rg in load(FILES / f"codec_{n}.parquet.expect.json")["row_groups"] for c in rg["columns"]}
        for n in ["none", "snappy", "zstd", "gzip", "lz4"]
    }
    assert codecs == {
        "none": {"UNCOMPRESSED"}, "snappy": {"SNAPPY"}, "zstd": {"ZSTD"}, "gzip": {"GZIP"}, "lz4": {"LZ4_RAW"},
    }
    d = load(FILES / "dictionary.parquet.expect.json")
    pages = {c["path"]: c["dictionary_page"] for c in d["row_groups"][0]["columns"]}
    assert pages == {"small_int": True, "city": True, "id": False}
    assert [rg["rows"] for rg in load(FILES / "row_groups_uneven.parquet.expect.json")["row_groups"]] == [100, 37, 250, 1]
    nulls = load(FILES / "nulls.parquet.expect.json")["columns"]
    assert None in nulls[1]["values"] and None not in nulls[2]["values"]
    assert load(FILES / "empty.parquet.expect.json")["num_rows"] == 0
    a = {f["name"]: f["type"] for f in load(FILES / "mismatch_a.parquet.expect.json")["schema"]}
    b = {f["name"]: f["type"] for f in load(FILES / "mismatch_b.parquet.expect.json")["schema"]}
    assert a == {"id": "int64", "label": "int32"} and b == {"id": "int64", "label": "int64"}
    lists = load(FILES / "type_list_int32.parquet.expect.json")["columns"][0]["values"]
    assert [] in lists and any(len(x) > 1 for x in lists)
    t = load(FILES / "type_fixed_shape_tensor_uint8.parquet.expect.json")["schema"][0]
    assert t["extension_name"] == "arrow.fixed_shape_tensor" and t["shape"] == [2, 3]
    assert load(FILES / "all_types.arrow.expect.json")["record_batches"] == [40, 24]


def test_float_bits_are_exact():
    # Independent of encode_values: the special values lead every float column.
    want = {
        "float16": [0x0000, 0x8000, 0x3C00, 0xBE00, 0x7C00, 0xFC00],
        "float32": [0x00000000, 0x80000000, 0x3F800000, 0xBFC00000, 0x7F800000, 0xFF800000],
        "float64": [0, 1 << 63, 0x3FF0000000000000, 0xBFF8000000000000, 0x7FF0000000000000, 0xFFF0000000000000],
    }
    for name, bits in want.items():
        vals = load(FILES / f"type_{name}.parquet.expect.json")["columns"][0]["values"]
        assert vals[:6] == bits, name
        nan = vals[6]
        width = {"float16": 16, "float32": 32, "float64": 64}[name]
        exp_mask = ((1 << (width - 1)) - 1) & ~((1 << {16: 10, 32: 23, 64: 52}[width]) - 1)
        assert nan & exp_mask == exp_mask and nan & ((1 << {16: 10, 32: 23, 64: 52}[width]) - 1), (name, hex(nan))


def test_total_size_is_small():
    total = sum(p.stat().st_size for p in FILES.iterdir() if not p.name.endswith(".json"))
    assert total < 1_500_000, total


def test_bad_files_are_what_they_claim():
    source = (FILES / "codec_none.parquet").read_bytes()
    assert (FILES / "bad_empty_bytes.parquet").stat().st_size == 0
    assert (FILES / "bad_truncated.parquet").read_bytes() == source[: len(source) // 2]
    magic = (FILES / "bad_magic.parquet").read_bytes()
    assert magic[:4] == magic[-4:] == b"PAR0" and magic[4:-4] == source[4:-4]
    for name in ["bad_footer.parquet", "bad_data_page.parquet"]:
        bad = (FILES / name).read_bytes()
        assert len(bad) == len(source) and bad != source
        assert bad[-4:] == b"PAR1"
    # The data page corruption leaves the footer intact: metadata still parses.
    md = gen.pq.ParquetFile(pa.BufferReader((FILES / "bad_data_page.parquet").read_bytes())).metadata
    assert md.num_rows == 200


# ---------------------------------------------------------------------------
# The other direction: pyarrow reads what `meshfeed gen` (arrow-go) writes, and
# the values are those of internal/datagen's documented scheme, ported here.

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
TAGS = {
    "label": 0x6C6162656C000001,
    "feature": 0x6665617475720002,
    "token_len": 0x746F6B6C656E0003,
    "token": 0x746F6B656E000004,
    "pixel": 0x706978656C000005,
}


def mix64(x):
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def row_base(seed, tag, row):
    return mix64(mix64(seed ^ TAGS[tag]) ^ (row & M64))


def meshfeed_binary(tmp_path):
    import os
    import shutil
    import subprocess

    found = shutil.which("meshfeed") or (str(HERE.parent / "bin" / "meshfeed") if (HERE.parent / "bin" / "meshfeed").exists() else None)
    if found:
        return found
    out = str(tmp_path / "meshfeed")
    subprocess.run(["go", "build", "-o", out, "./cmd/meshfeed"], cwd=HERE.parent, check=True, env=dict(os.environ))
    return out


@pytest.mark.parametrize("fmt,codec", [("parquet", "lz4"), ("parquet", "gzip"), ("arrow", "zstd")])
def test_pyarrow_reads_meshfeed_gen(tmp_path, fmt, codec):
    import subprocess

    import numpy as np
    import pyarrow.dataset as ds

    seed, rows = 42, 300
    out = tmp_path / "ds"
    subprocess.run(
        [meshfeed_binary(tmp_path), "gen", "--out", str(out), "--rows", str(rows), "--files", "2",
         "--row-group-rows", "64", "--features", "5", "--tokens", "0:7", "--image", "2x3x2",
         "--format", fmt, "--compression", codec, "--seed", str(seed)],
        check=True, capture_output=True, text=True,
    )
    files = sorted(str(p) for p in out.glob(f"part-*.{fmt}"))
    assert [pathlib.Path(f).name for f in files] == [f"part-00000.{fmt}", f"part-00001.{fmt}"]
    table = ds.dataset(files, format="parquet" if fmt == "parquet" else "ipc").to_table()
    assert table.num_rows == rows
    img = table.schema.field("image").type
    assert isinstance(img, pa.FixedShapeTensorType) and list(img.shape) == [2, 3, 2], img
    if fmt == "parquet":
        pf = gen.pq.ParquetFile(files[0])
        assert [pf.metadata.row_group(g).num_rows for g in range(pf.metadata.num_row_groups)] == [64, 64, 22]
        want_codec = {"lz4": "LZ4", "gzip": "GZIP"}[codec]  # pyarrow's name for LZ4_RAW is LZ4
        assert pf.metadata.row_group(0).column(0).compression == want_codec
    ids = table.column("id").to_pylist()
    assert ids == list(range(rows))
    labels = table.column("label").to_pylist()
    feats = table.column("features").combine_chunks().flatten().to_numpy().reshape(rows, 5)
    tokens = table.column("tokens").to_pylist()
    pixels = table.column("image").combine_chunks().storage.flatten().to_numpy().reshape(rows, 12)
    for r in range(rows):
        assert labels[r] == row_base(seed, "label", r) % 1000, r
        fb = row_base(seed, "feature", r)
        want = [np.float32(((mix64((fb + j * GOLDEN) & M64) >> 40) - (1 << 23)) / (1 << 23)) for j in range(5)]
        assert feats[r].tolist() == want, r
        n = row_base(seed, "token_len", r) % 8
        tb = row_base(seed, "token", r)
        assert tokens[r] == [mix64((tb + k * GOLDEN) & M64) % 32000 for k in range(n)], r
        pb = row_base(seed, "pixel", r)
        assert pixels[r].tolist() == [(mix64((pb + (i // 8) * GOLDEN) & M64) >> (8 * (i % 8))) & 0xFF for i in range(12)], r
