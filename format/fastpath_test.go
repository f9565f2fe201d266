package format

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	pqformat "github.com/parquet-go/parquet-go/format"
)

// The fast path (fastpath.go) must be taken for the benchmark's layout
// (int64, int32 and fixed_size_list<float32> without nulls, PLAIN pages)
// under every codec it handles and both page versions, must leave every other
// chunk to decodeChunk, and must turn corrupt pages into ErrCorrupt. Values
// are checked against the formulas that generated them, not against either
// decoder.

// readColumn decodes every row group of path's column col, checks the values
// and returns how many chunks the fast path decoded.
func readColumn(t *testing.T, path, col string) (fast int64, rowGroups int) {
	t.Helper()
	ctx := context.Background()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	o := testOptions()
	o.Fill = map[string]float64{"maybe": -1}
	f := mustOpen(t, path, []string{col}, o)
	before := fastChunks.Load()
	first := 0
	for rg, meta := range f.rgs {
		rec, err := f.readRowGroup(ctx, rg, mem)
		if err != nil {
			t.Fatalf("column %q row group %d: %v", col, rg, err)
		}
		defer rec.Release()
		if rec.NumRows() != meta.Rows {
			t.Fatalf("column %q row group %d: %d rows, want %d", col, rg, rec.NumRows(), meta.Rows)
		}
		checkColumn(t, col, rec.Column(0), first)
		first += int(meta.Rows)
	}
	return fastChunks.Load() - before, len(f.rgs)
}

func TestFastPathTaken(t *testing.T) {
	// Row groups of 1000, 1000 and 500 rows (uneven last one).
	var recs []arrow.RecordBatch
	for first := 0; first < 2500; first += 1000 {
		rec := fastRecord(first, min(1000, 2500-first))
		defer rec.Release()
		recs = append(recs, rec)
	}
	dir := t.TempDir()
	codecs := []struct {
		name  string
		codec compress.Compression
		fast  bool
	}{
		{"none", compress.Codecs.Uncompressed, true},
		{"snappy", compress.Codecs.Snappy, true},
		{"zstd", compress.Codecs.Zstd, true},
		{"gzip", compress.Codecs.Gzip, true},
		{"lz4raw", compress.Codecs.Lz4Raw, false}, // arrow-go fallback path
	}
	// Columns and whether the fast path takes them in a plain file.
	cols := []struct {
		name string
		fast bool
	}{
		{"id", true}, {"label", true}, {"features", true}, {"nfeatures", true},
		{"flag", false},  // bool: bit-packed
		{"small", true},  // int8 narrowed from INT32 on the fast path
		{"pixels", true}, // fixed_size_list<uint8>, narrowed from INT32
		{"maybe", false}, // nulls
		{"tokens", true},
		{"etokens", false}, // empty lists
	}
	for _, c := range codecs {
		for _, dict := range []bool{false, true} {
			for _, v2 := range []bool{false, true} {
				label := fmt.Sprintf("%s_dict%v_v2%v", c.name, dict, v2)
				t.Run(label, func(t *testing.T) {
					path := filepath.Join(dir, label+".parquet")
					version := pq.DataPageV1
					if v2 {
						version = pq.DataPageV2
					}
					writeFastFile(t, path, recs,
						pq.WithCompression(c.codec),
						pq.WithDictionaryDefault(dict),
						pq.WithDataPageVersion(version),
						pq.WithMaxRowGroupLength(1000),
						pq.WithDataPageSize(2<<10), // several pages per chunk
					)
					for _, col := range cols {
						got, rgs := readColumn(t, path, col.name)
						want := int64(0)
						if col.fast && c.fast {
							// the chunks the writer stored without a dictionary
							// page (it may give up on one, e.g. for int8)
							want = plainChunks(t, path, col.name)
						}
						if dict && col.name == "id" && want != 0 {
							t.Fatalf("%s: the writer stored id without a dictionary: the test no longer covers dictionary chunks", label)
						}
						if got != want {
							t.Errorf("%s column %q: fast path decoded %d of %d chunks, want %d", label, col.name, got, rgs, want)
						}
					}
				})
			}
		}
	}
}

// Hand-built chunks for the unit tests of decodeFast.

func pageHeader(t *testing.T, h pqformat.PageHeader) []byte {
	t.Helper()
	b, err := thrift.Marshal(new(thrift.CompactProtocol), &h)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rleRun is one RLE run of count copies of a level (bit width 1).
func rleRun(count int, level byte) []byte {
	var b []byte
	b = appendUvarint(b, uint64(count)<<1)
	return append(b, level)
}

func appendUvarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func levelSectionOf(levels []byte) []byte {
	n := len(levels)
	return append([]byte{byte(n), byte(n >> 8), byte(n >> 16), byte(n >> 24)}, levels...)
}

func int64Plain(vals ...int64) []byte {
	var b []byte
	for _, v := range vals {
		for k := 0; k < 8; k++ {
			b = append(b, byte(uint64(v)>>(8*k)))
		}
	}
	return b
}

// v1Page builds a v1 data page of an optional INT64 column (max def 1) from
// its uncompressed body.
func v1Page(t *testing.T, codec pqformat.CompressionCodec, nvals int, body []byte) []byte {
	t.Helper()
	data := compressFor(t, codec, body)
	h := pqformat.PageHeader{Type: pqformat.DataPage, UncompressedPageSize: int32(len(body)), CompressedPageSize: int32(len(data))}
	h.DataPageHeader = thrift.New(pqformat.DataPageHeader{NumValues: int32(nvals), Encoding: pqformat.Plain, DefinitionLevelEncoding: pqformat.RLE, RepetitionLevelEncoding: pqformat.RLE})
	return append(pageHeader(t, h), data...)
}

// v2Page builds a v2 data page with the given levels and values.
func v2Page(t *testing.T, codec pqformat.CompressionCodec, nvals, nulls int, levels, values []byte) []byte {
	t.Helper()
	data := compressFor(t, codec, values)
	h := pqformat.PageHeader{Type: pqformat.DataPageV2, UncompressedPageSize: int32(len(levels) + len(values)), CompressedPageSize: int32(len(levels) + len(data))}
	h.DataPageHeaderV2 = thrift.New(pqformat.DataPageHeaderV2{NumValues: int32(nvals), NumNulls: int32(nulls), NumRows: int32(nvals), Encoding: pqformat.Plain, DefinitionLevelsByteLength: int32(len(levels))})
	return append(append(pageHeader(t, h), levels...), data...)
}

func compressFor(t *testing.T, codec pqformat.CompressionCodec, b []byte) []byte {
	t.Helper()
	switch codec {
	case pqformat.Uncompressed:
		return b
	case pqformat.Snappy:
		return snappy.Encode(nil, b)
	case pqformat.Zstd:
		e, err := zstd.NewWriter(nil)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		return e.EncodeAll(b, nil)
	}
	t.Fatalf("no test encoder for %s", codec)
	return nil
}

// optInt64 is the decoder of an optional INT64 column (max def 1).
func optInt64() *colDecoder {
	return &colDecoder{name: "x", field: arrow.Field{Name: "x", Type: arrow.PrimitiveTypes.Int64}, elem: arrow.PrimitiveTypes.Int64,
		elemSize: 8, kind: kindPrimitive, phys: parquet.Int64, maxDef: 1}
}

type fastResult int

const (
	resDecoded  fastResult = iota // fast path, values as expected
	resFallback                   // not taken
	resCorrupt                    // ErrCorrupt
)

func (r fastResult) String() string {
	return [...]string{"decoded", "fallback", "ErrCorrupt"}[r]
}

func runFast(t *testing.T, c *colDecoder, chunk []byte, codec pqformat.CompressionCodec, rows int64) (fastResult, arrow.Array, error) {
	t.Helper()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	out, err := c.decodeRows(chunkView{b: chunk, codec: codec, n: c.slot(rows)}, rowRange{0, rows}, outSpec{mem: mem, maxBytes: 1 << 30})
	a := out.a
	switch {
	case err == errFallback:
		err = nil
		if a != nil || err != nil {
			t.Fatalf("fallback with array %v, error %v", a, err)
		}
		return resFallback, nil, nil
	case err != nil:
		if a != nil {
			t.Fatalf("error %v with an array", err)
		}
		if errors.Is(err, ErrCorrupt) {
			return resCorrupt, nil, err
		}
		t.Fatalf("unclassified error: %v", err)
	}
	// Copy the values out so that the checked allocator balances.
	vals := append([]int64(nil), a.(*array.Int64).Int64Values()...)
	a.Release()
	return resDecoded, array.NewInt64Data(array.NewData(arrow.PrimitiveTypes.Int64, len(vals), []*memory.Buffer{nil, memory.NewBufferBytes(int64Plain(vals...))}, nil, 0, 0)), nil
}

func TestDecodeFastPages(t *testing.T) {
	allDef := func(n int) []byte { return levelSectionOf(rleRun(n, 1)) }
	codecs := []pqformat.CompressionCodec{pqformat.Uncompressed, pqformat.Snappy, pqformat.Zstd}
	type tc struct {
		name  string
		chunk func(codec pqformat.CompressionCodec) []byte
		rows  int64
		want  fastResult
	}
	var cases []tc
	cases = append(cases,
		tc{"v1 two pages", func(cd pqformat.CompressionCodec) []byte {
			return append(v1Page(t, cd, 2, append(allDef(2), int64Plain(1, 2)...)), v1Page(t, cd, 1, append(allDef(1), int64Plain(3)...))...)
		}, 3, resDecoded},
		tc{"v2 two pages", func(cd pqformat.CompressionCodec) []byte {
			return append(v2Page(t, cd, 2, 0, rleRun(2, 1), int64Plain(1, 2)), v2Page(t, cd, 1, 0, rleRun(1, 1), int64Plain(3))...)
		}, 3, resDecoded},
		tc{"v1 then v2", func(cd pqformat.CompressionCodec) []byte {
			return append(v1Page(t, cd, 2, append(allDef(2), int64Plain(1, 2)...)), v2Page(t, cd, 1, 0, nil, int64Plain(3))...)
		}, 3, resDecoded},
		tc{"v1 def runs split", func(cd pqformat.CompressionCodec) []byte {
			return v1Page(t, cd, 3, append(levelSectionOf(append(rleRun(1, 1), rleRun(2, 1)...)), int64Plain(1, 2, 3)...))
		}, 3, resDecoded},
		// Nulls: decodeChunk handles them (fill values, ErrNull).
		tc{"v1 null level", func(cd pqformat.CompressionCodec) []byte {
			return v1Page(t, cd, 3, append(levelSectionOf(append(rleRun(2, 1), rleRun(1, 0)...)), int64Plain(1, 2)...))
		}, 3, resFallback},
		tc{"v1 bit-packed levels", func(cd pqformat.CompressionCodec) []byte {
			return v1Page(t, cd, 3, append(levelSectionOf([]byte{0x03, 0x07}), int64Plain(1, 2, 3)...))
		}, 3, resFallback},
		tc{"v2 nulls", func(cd pqformat.CompressionCodec) []byte {
			return v2Page(t, cd, 3, 1, []byte{0x03, 0x03}, int64Plain(1, 2))
		}, 3, resFallback},
		tc{"dictionary page", func(cd pqformat.CompressionCodec) []byte {
			h := pqformat.PageHeader{Type: pqformat.DictionaryPage, UncompressedPageSize: 8, CompressedPageSize: 8}
			h.DictionaryPageHeader = thrift.New(pqformat.DictionaryPageHeader{NumValues: 1, Encoding: pqformat.Plain})
			return append(append(pageHeader(t, h), int64Plain(1)...), v2Page(t, pqformat.Uncompressed, 1, 0, nil, int64Plain(3))...)
		}, 1, resFallback},
		tc{"unparsable header", func(cd pqformat.CompressionCodec) []byte { return []byte{0xff, 0xff, 0xff} }, 3, resFallback},
		// Corrupt counts and lengths.
		tc{"v1 values short of num_values", func(cd pqformat.CompressionCodec) []byte {
			return v1Page(t, cd, 3, append(allDef(3), int64Plain(1, 2)...))
		}, 3, resCorrupt},
		tc{"v1 values not a multiple", func(cd pqformat.CompressionCodec) []byte {
			return v1Page(t, cd, 2, append(allDef(2), append(int64Plain(1, 2), 9)...))
		}, 2, resCorrupt},
		tc{"v1 level length past page", func(cd pqformat.CompressionCodec) []byte {
			return v1Page(t, cd, 1, append([]byte{0xff, 0, 0, 0, 2, 1}, int64Plain(1)...))
		}, 1, resCorrupt},
		tc{"v1 no level section", func(cd pqformat.CompressionCodec) []byte { return v1Page(t, cd, 0, []byte{1}) }, 0, resCorrupt},
		tc{"v2 values longer than num_values", func(cd pqformat.CompressionCodec) []byte {
			return v2Page(t, cd, 2, 0, nil, int64Plain(1, 2, 3))
		}, 2, resCorrupt},
		tc{"pages fewer than rows", func(cd pqformat.CompressionCodec) []byte {
			return v2Page(t, cd, 2, 0, nil, int64Plain(1, 2))
		}, 3, resCorrupt},
		tc{"pages more than rows", func(cd pqformat.CompressionCodec) []byte {
			return v2Page(t, cd, 2, 0, nil, int64Plain(1, 2))
		}, 1, resCorrupt},
	)
	for _, cd := range codecs {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/%s", cd, c.name), func(t *testing.T) {
				got, a, err := runFast(t, optInt64(), c.chunk(cd), cd, c.rows)
				if got != c.want {
					t.Fatalf("decodeFast(%q) = %v (%v), want %v", c.name, got, err, c.want)
				}
				if a != nil {
					defer a.Release()
					want := []int64{1, 2, 3}[:c.rows]
					if v := a.(*array.Int64).Int64Values(); fmt.Sprint(v) != fmt.Sprint(want) {
						t.Fatalf("decodeFast(%q) values = %v, want %v", c.name, v, want)
					}
				}
			})
		}
	}
}

func TestDecodeFastCorruptCompressed(t *testing.T) {
	body := int64Plain(1, 2, 3, 4)
	cases := []struct {
		name  string
		codec pqformat.CompressionCodec
		data  []byte
	}{
		{"snappy garbage", pqformat.Snappy, []byte{0x20, 0xff, 0xff, 0xff}},
		{"snappy claims 4 GB", pqformat.Snappy, append(appendUvarint(nil, 0xfffffff0), 0)},
		{"snappy short", pqformat.Snappy, snappy.Encode(nil, body[:24])},
		{"zstd garbage", pqformat.Zstd, []byte{0x28, 0xb5, 0x2f, 0xfd, 1, 2, 3}},
		{"zstd long", pqformat.Zstd, compressFor(t, pqformat.Zstd, append(body, body...))},
		{"gzip garbage", pqformat.Gzip, []byte{0x1f, 0x8b, 8, 0, 0, 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// The header states the right sizes; the compressed values lie.
			h := pqformat.PageHeader{Type: pqformat.DataPageV2, UncompressedPageSize: int32(len(body)), CompressedPageSize: int32(len(c.data))}
			h.DataPageHeaderV2 = thrift.New(pqformat.DataPageHeaderV2{NumValues: 4, NumRows: 4, Encoding: pqformat.Plain})
			chunk := append(pageHeader(t, h), c.data...)
			if got, _, err := runFast(t, optInt64(), chunk, c.codec, 4); got != resCorrupt {
				t.Fatalf("decodeFast(%q) = %v (%v), want %v", c.name, got, err, resCorrupt)
			}
		})
	}
}

// TestDecodeFastMutations corrupts valid chunks at random: every outcome must
// be a fallback, ErrCorrupt, or a decode of the right length; never a panic.
func TestDecodeFastMutations(t *testing.T) {
	rng := rand.New(rand.NewPCG(fastSeed(t), 3))
	vals := make([]int64, 300)
	for i := range vals {
		vals[i] = rng.Int64()
	}
	var seeds [][]byte
	var codecs []pqformat.CompressionCodec
	for _, cd := range []pqformat.CompressionCodec{pqformat.Uncompressed, pqformat.Snappy, pqformat.Zstd} {
		v1 := append(v1Page(t, cd, 200, append(levelSectionOf(rleRun(200, 1)), int64Plain(vals[:200]...)...)),
			v1Page(t, cd, 100, append(levelSectionOf(rleRun(100, 1)), int64Plain(vals[200:]...)...))...)
		v2 := append(v2Page(t, cd, 200, 0, rleRun(200, 1), int64Plain(vals[:200]...)), v2Page(t, cd, 100, 0, rleRun(100, 1), int64Plain(vals[200:]...))...)
		seeds = append(seeds, v1, v2)
		codecs = append(codecs, cd, cd)
	}
	n := 3000
	if testing.Short() {
		n = 500
	}
	for i := 0; i < n; i++ {
		k := rng.IntN(len(seeds))
		b := bytes.Clone(seeds[k])
		for m := rng.IntN(4) + 1; m > 0 && len(b) > 0; m-- {
			switch rng.IntN(3) {
			case 0:
				b[rng.IntN(len(b))] = byte(rng.IntN(256))
			case 1:
				b = b[:rng.IntN(len(b))]
			default:
				b[rng.IntN(len(b))] ^= 1 << rng.IntN(8)
			}
		}
		got, a, err := runFast(t, optInt64(), b, codecs[k], int64(len(vals)))
		if got == resDecoded {
			if a.Len() != len(vals) {
				t.Fatalf("mutation %d: decoded %d values, want %d", i, a.Len(), len(vals))
			}
			a.Release()
		}
		_ = err
	}
}

// rowStarts against levels expanded by hand, for random lists encoded in
// RLE and bit-packed runs, and its errors on corrupt levels.
func TestRowStarts(t *testing.T) {
	rng := rand.New(rand.NewPCG(fastSeed(t), 3))
	for trial := range 200 {
		// Random list lengths (>= 1), expanded to levels.
		var levels []byte
		var want []int32
		for len(levels) < 1+rng.IntN(300) {
			want = append(want, int32(len(levels)))
			n := 1 + rng.IntN(12)
			if rng.IntN(3) == 0 {
				n = 1
			}
			levels = append(levels, 0)
			for range n - 1 {
				levels = append(levels, 1)
			}
		}
		// Encode: RLE runs where 8 or more equal levels follow, else
		// bit-packed groups of 8 (the last one padded with 1s).
		var enc []byte
		for i := 0; i < len(levels); {
			j := i
			for j < len(levels) && levels[j] == levels[i] {
				j++
			}
			if j-i >= 8 && rng.IntN(4) != 0 {
				enc = append(enc, rleRun(j-i, levels[i])...)
				i = j
				continue
			}
			groups := 1 + rng.IntN(3)
			enc = appendUvarint(enc, uint64(groups)<<1|1)
			for g := range groups {
				var b byte
				for k := range 8 {
					if p := i + g*8 + k; p >= len(levels) || levels[p] == 1 {
						b |= 1 << k
					}
				}
				enc = append(enc, b)
			}
			i = min(i+groups*8, len(levels))
		}
		const base = 5
		offs := make([]int32, len(want))
		n, more, err := rowStarts(enc, len(levels), base, offs, 0)
		if err != nil || more {
			t.Fatalf("trial %d: more %v, %v", trial, more, err)
		}
		if got, _, err := rowStarts(enc, len(levels), base, nil, 0); got != len(want) || err != nil {
			t.Fatalf("trial %d: counted %d rows (%v), want %d", trial, got, err, len(want))
		}
		if n != len(want) {
			t.Fatalf("trial %d: %d rows, want %d", trial, n, len(want))
		}
		for i := range want {
			if offs[i] != want[i]+base {
				t.Fatalf("trial %d: row %d starts at %d, want %d", trial, i, offs[i], want[i]+base)
			}
		}
		// One row slot fewer than the levels start: the slots filled and
		// more reported, not a write past the slice.
		clear(offs)
		if n, more, err := rowStarts(enc, len(levels), base, offs[:len(want)-1], 0); n != len(want)-1 || !more || err != nil {
			t.Fatalf("trial %d: more rows than slots: %d rows, more %v, %v; want %d, true", trial, n, more, err, len(want)-1)
		}
		if len(want) > 1 && offs[len(want)-2] != want[len(want)-2]+base || offs[len(want)-1] != 0 {
			t.Fatalf("trial %d: slots %v, want %v + %d in all but the last", trial, offs, want, base)
		}
	}
	offs := make([]int32, 16)
	for _, tc := range []struct {
		name string
		enc  []byte
		n    int
	}{
		{"empty", nil, 3},
		{"zero-length run", rleRun(0, 0), 3},
		{"level 2", rleRun(3, 2), 3},
		{"truncated RLE", appendUvarint(nil, 3<<1), 3},
		{"truncated bit-packed", appendUvarint(nil, 4<<1|1), 3},
		{"bad uvarint", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 3},
	} {
		if _, _, err := rowStarts(tc.enc, tc.n, 0, offs, 0); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", tc.name, err)
		}
	}
}
