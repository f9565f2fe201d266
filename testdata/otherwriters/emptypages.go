package main

// Data pages that hold nothing: pages of only nulls or only empty lists
// (no value bytes; what every writer makes of long null runs), and pages of 0
// values and 0 rows, which some writers leave at the start or end of a column
// chunk (a page flushed before any value was written, or after the last).
// arrow-go's writer makes the first kind; the second is spliced in by hand:
// an empty page (PLAIN, uncompressed, empty levels) after the last data page
// of every column chunk, and in a second file before the first too, the
// footer's offsets and sizes rewritten to match. The result is checked by reading its page headers
// back (checkPages).

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sort"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"
)

// emptyPagesFile writes id int64, x int32, s string and b bool with runs of
// 30 nulls, l list<int32> with runs of empty and of null lists, and n
// float64 all null, in data pages of at most 10 rows (v2 or v1) with codec,
// then splices empty pages into every column chunk: after the last data
// page (path.parquet), and also before the first (path_leading.parquet:
// pyarrow 26 reads such a column chunk as 0 rows; its values are those of
// path.parquet).
func emptyPagesFile(path string, rng *rand.Rand, v2 bool, codec compress.Compression) {
	mem := memory.NewGoAllocator()
	sch := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "x", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "l", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
		{Name: "n", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "b", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(mem, sch)
	defer b.Release()
	for i := 0; i < rows; i++ {
		run := (i / 30) % 3 // 0: values, 1: nulls, 2: values (empty lists)
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		lb := b.Field(3).(*array.ListBuilder)
		if run == 1 {
			b.Field(1).AppendNull()
			b.Field(2).AppendNull()
			b.Field(5).AppendNull()
			lb.AppendNull()
		} else {
			b.Field(1).(*array.Int32Builder).Append(rng.Int32N(1000))
			b.Field(2).(*array.StringBuilder).Append(fmt.Sprintf("v%d", rng.IntN(20)))
			b.Field(5).(*array.BooleanBuilder).Append(rng.IntN(2) == 0)
			lb.Append(true)
			for j := rng.IntN(3); run == 0 && j > 0; j-- {
				lb.ValueBuilder().(*array.Int32Builder).Append(rng.Int32N(100))
			}
		}
		b.Field(4).AppendNull()
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	version := parquet.DataPageV1
	if v2 {
		version = parquet.DataPageV2
	}
	var buf bytes.Buffer
	props := parquet.NewWriterProperties(parquet.WithCompression(codec), parquet.WithDataPageVersion(version),
		parquet.WithDataPageSize(1), parquet.WithBatchSize(10), parquet.WithMaxRowGroupLength(100),
		parquet.WithDictionaryDefault(false), parquet.WithDictionaryFor("s", true),
		parquet.WithCreatedBy("meshfeed testdata/otherwriters"))
	w := must(pqarrow.NewFileWriter(sch, &buf, props, pqarrow.DefaultWriterProps()))
	if err := w.Write(rec); err != nil {
		fail(err)
	}
	if err := w.Close(); err != nil {
		fail(err)
	}
	for _, lead := range []bool{false, true} {
		p := path + ".parquet"
		if lead {
			p = path + "_leading.parquet"
		}
		if err := os.WriteFile(p, spliceEmptyPages(buf.Bytes(), v2, lead), 0o644); err != nil {
			fail(err)
		}
		checkPages(p, v2, lead)
	}
}

// spliceEmptyPages returns the Parquet file raw with an empty data page before
// the first and after the last data page of every column chunk.
func spliceEmptyPages(raw []byte, v2, lead bool) []byte {
	flen := int(uint32(raw[len(raw)-8]) | uint32(raw[len(raw)-7])<<8 | uint32(raw[len(raw)-6])<<16 | uint32(raw[len(raw)-5])<<24)
	var md format.FileMetaData
	if err := thrift.Unmarshal(new(thrift.CompactProtocol), raw[len(raw)-8-flen:len(raw)-8], &md); err != nil {
		fail(err)
	}
	hdr := format.PageHeader{Type: format.DataPage}
	if v2 {
		hdr.Type = format.DataPageV2
		hdr.DataPageHeaderV2 = thrift.New(format.DataPageHeaderV2{Encoding: format.Plain, IsCompressed: thrift.New(false)})
	} else {
		hdr.DataPageHeader = thrift.New(format.DataPageHeader{Encoding: format.Plain, DefinitionLevelEncoding: format.RLE, RepetitionLevelEncoding: format.RLE})
	}
	// A v1 page's levels are length-prefixed: an empty one holds a 0
	// length for each kind of level its column has (the file is
	// uncompressed, so the body is stored as is). v2 pages carry the
	// lengths in the header and hold no bytes.
	emptyPage := func(leaf int) []byte {
		h := hdr
		var body []byte
		if !v2 {
			body = make([]byte, 4*levelKinds(md.Schema)[leaf])
			h.UncompressedPageSize, h.CompressedPageSize = int32(len(body)), int32(len(body))
		}
		return append(must(thrift.Marshal(new(thrift.CompactProtocol), &h)), body...)
	}
	pages := 1
	if lead {
		pages = 2
	}
	type ref struct{ rg, col int }
	var refs []ref
	for ri := range md.RowGroups {
		for ci := range md.RowGroups[ri].Columns {
			cc := &md.RowGroups[ri].Columns[ci]
			if cc.ColumnIndexOffset != 0 || cc.OffsetIndexOffset != 0 || cc.MetaData.BloomFilterOffset != 0 || cc.MetaData.IndexPageOffset != 0 {
				fail(fmt.Errorf("row group %d column %d: page index or bloom filter: not spliced", ri, ci))
			}
			refs = append(refs, ref{ri, ci})
		}
	}
	start := func(r ref) int64 {
		m := &md.RowGroups[r.rg].Columns[r.col].MetaData
		if m.DictionaryPageOffset > 0 {
			return m.DictionaryPageOffset
		}
		return m.DataPageOffset
	}
	sort.Slice(refs, func(i, j int) bool { return start(refs[i]) < start(refs[j]) })
	var out bytes.Buffer
	pos := int64(0)
	for _, r := range refs {
		m := &md.RowGroups[r.rg].Columns[r.col].MetaData
		s, d, e := start(r), m.DataPageOffset, start(r)+m.TotalCompressedSize
		empty := emptyPage(r.col)
		out.Write(raw[pos:s])
		newStart := int64(out.Len())
		out.Write(raw[s:d]) // the dictionary page
		newData := int64(out.Len())
		if lead {
			out.Write(empty)
		}
		out.Write(raw[d:e])
		out.Write(empty)
		pos = e
		rg := &md.RowGroups[r.rg]
		rg.TotalByteSize += int64(pages * len(empty))
		rg.TotalCompressedSize += int64(pages * len(empty))
		if m.DictionaryPageOffset > 0 {
			m.DictionaryPageOffset = newStart
		}
		m.DataPageOffset = newData
		m.TotalCompressedSize += int64(pages * len(empty))
		m.TotalUncompressedSize += int64(pages * len(empty))
		md.RowGroups[r.rg].Columns[r.col].FileOffset = newStart
		pageType := format.DataPage
		if v2 {
			pageType = format.DataPageV2
		}
		m.EncodingStats = append(m.EncodingStats, format.PageEncodingStats{PageType: pageType, Encoding: format.Plain, Count: int32(pages)})
	}
	out.Write(raw[pos : len(raw)-8-flen])
	for ri := range md.RowGroups {
		rg := &md.RowGroups[ri]
		first := int64(-1)
		for ci := range rg.Columns {
			m := &rg.Columns[ci].MetaData
			s := m.DataPageOffset
			if m.DictionaryPageOffset > 0 {
				s = m.DictionaryPageOffset
			}
			if first < 0 || s < first {
				first = s
			}
		}
		rg.FileOffset = first
	}
	footer := must(thrift.Marshal(new(thrift.CompactProtocol), &md))
	out.Write(footer)
	n := len(footer)
	out.Write([]byte{byte(n), byte(n >> 8), byte(n >> 16), byte(n >> 24)})
	out.WriteString("PAR1")
	return out.Bytes()
}

// levelKinds is, per leaf column of a flattened schema, how many kinds of
// levels its pages hold: repetition (a repeated node on its path) and
// definition (an optional or repeated one).
func levelKinds(elems []format.SchemaElement) []int {
	var out []int
	var walk func(i int, rep, def bool) int
	walk = func(i int, rep, def bool) int {
		e := &elems[i]
		if rt, ok := e.RepetitionType.Get(); i > 0 && ok {
			switch rt {
			case format.Repeated:
				rep, def = true, true
			case format.Optional:
				def = true
			}
		}
		nc, _ := e.NumChildren.Get()
		if nc == 0 {
			n := 0
			if rep {
				n++
			}
			if def {
				n++
			}
			out = append(out, n)
			return i + 1
		}
		j := i + 1
		for range nc {
			j = walk(j, rep, def)
		}
		return j
	}
	walk(0, false, false)
	return out
}

// checkPages reads every page header of path back (parquet-go's thrift
// decoder, walking each column chunk's bytes) and fails unless each column
// chunk starts and ends with a data page of 0 values and 0 rows, and, for
// v2, some chunk has a page of only nulls (values, all null: no value bytes).
func checkPages(path string, v2, lead bool) {
	raw := must(os.ReadFile(path))
	flen := int(uint32(raw[len(raw)-8]) | uint32(raw[len(raw)-7])<<8 | uint32(raw[len(raw)-6])<<16 | uint32(raw[len(raw)-5])<<24)
	var md format.FileMetaData
	if err := thrift.Unmarshal(new(thrift.CompactProtocol), raw[len(raw)-8-flen:len(raw)-8], &md); err != nil {
		fail(err)
	}
	nullPages := 0
	for ri, rg := range md.RowGroups {
		for ci, cc := range rg.Columns {
			m := &cc.MetaData
			s := m.DataPageOffset
			if m.DictionaryPageOffset > 0 {
				s = m.DictionaryPageOffset
			}
			r := bytes.NewReader(raw[s : s+m.TotalCompressedSize])
			var counts []int32
			for r.Len() > 0 {
				var h format.PageHeader
				if err := thrift.NewDecoder(new(thrift.CompactProtocol).NewReader(r)).Decode(&h); err != nil {
					fail(fmt.Errorf("%s row group %d column %d: page header: %w", path, ri, ci, err))
				}
				if _, err := r.Seek(int64(h.CompressedPageSize), io.SeekCurrent); err != nil {
					fail(err)
				}
				switch h.Type {
				case format.DataPageV2:
					dp, _ := h.DataPageHeaderV2.Get()
					if !v2 {
						fail(fmt.Errorf("%s: a v2 page in a v1 file", path))
					}
					counts = append(counts, dp.NumValues)
					if dp.NumValues > 0 && dp.NumNulls == dp.NumValues {
						nullPages++
					}
					if dp.NumValues == 0 && (dp.NumRows != 0 || h.CompressedPageSize != 0) {
						fail(fmt.Errorf("%s: an empty page of %d rows, %d bytes", path, dp.NumRows, h.CompressedPageSize))
					}
				case format.DataPage:
					dp, _ := h.DataPageHeader.Get()
					if v2 {
						fail(fmt.Errorf("%s: a v1 page in a v2 file", path))
					}
					counts = append(counts, dp.NumValues)
				}
			}
			if len(counts) < 2 || counts[len(counts)-1] != 0 || (lead && counts[0] != 0) {
				fail(fmt.Errorf("%s row group %d column %d: page value counts %v: want empty first and last pages", path, ri, ci, counts))
			}
		}
	}
	if v2 && nullPages == 0 {
		fail(fmt.Errorf("%s: no page of only nulls", path))
	}
}
