package format

// Nulls from the footers: each column chunk's statistics may record its null
// count. Planning uses it to refuse, before a data page is read, a column with
// nulls that nothing can stand in for; decoding uses it to keep the fast paths
// for chunks that hold none.

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/parquet-go/parquet-go"
)

// chunkNulls is the null count the footer records for leaf column leaf of row
// group rg; known is false when the writer recorded none (or arrow-go
// could not parse the footer). parquet-go's parse reads an absent count as 0:
// a count above 0 is known from it; a 0 is taken as known from writers that
// write the count with every statistics they write (recordedNulls), and
// otherwise asked of arrow-go's parse, which tells an absent count apart.
func (p *parquetFooter) chunkNulls(rg, leaf int) (n int64, known bool) {
	if n := p.recordedNulls(rg, leaf); n > 0 {
		return n, true
	}
	if rg < len(p.pf.Metadata().RowGroups) && leaf < len(p.pf.Metadata().RowGroups[rg].Columns) {
		st := &p.pf.Metadata().RowGroups[rg].Columns[leaf].MetaData.Statistics
		if (len(st.Min) > 0 || len(st.Max) > 0 || len(st.MinValue) > 0 || len(st.MaxValue) > 0) && writesNullCounts(p.pf.Metadata().CreatedBy) {
			return 0, true
		}
	}
	md, err := p.arrowMD()
	if err != nil || rg >= md.NumRowGroups() {
		return 0, false
	}
	cc, err := md.RowGroup(rg).ColumnChunk(leaf)
	if err != nil {
		return 0, false
	}
	st, err := cc.Statistics()
	if err != nil || st == nil || !st.HasNullCount() {
		return 0, false
	}
	return st.NullCount(), true
}

// recordedNulls is the null count parquet-go's parse of the footer gives for
// leaf column leaf of row group rg: the count where the writer recorded one
// above 0, else 0 (none recorded, or none). Enough to refuse a column that
// holds nulls; chunkNulls tells 0 from unknown.
func (p *parquetFooter) recordedNulls(rg, leaf int) int64 {
	rgs := p.pf.Metadata().RowGroups
	if rg >= len(rgs) || leaf >= len(rgs[rg].Columns) {
		return 0
	}
	return max(rgs[rg].Columns[leaf].MetaData.Statistics.NullCount, 0)
}

// writesNullCounts reports whether the writer named by a footer's created_by
// writes null_count in every column statistics it writes (the format's
// "writers SHOULD always write this field"): Arrow C++ (pyarrow),
// parquet-mr (Spark, Hive), arrow-go (and meshfeed gen, which writes with
// it) and parquet-go.
func writesNullCounts(createdBy string) bool {
	for _, w := range []string{"parquet-cpp-arrow ", "parquet-cpp ", "parquet-mr ", "parquet-go ", "github.com/parquet-go/parquet-go", "meshfeed datagen (arrow-go "} {
		if strings.HasPrefix(createdBy, w) {
			return true
		}
	}
	return false
}

// columnNulls sums the null counts of column name (all its leaves, all row
// groups); known is false when some chunk records none.
func (p *parquetFooter) columnNulls(name string) (n int64, known bool) {
	known = true
	for rg := range p.pf.Metadata().RowGroups {
		for _, leaf := range p.leaves[name] {
			k, ok := p.chunkNulls(rg, leaf)
			n += k
			known = known && ok
		}
	}
	return n, known
}

// MayHoldNulls reports whether column name can hold nulls at all (an optional
// node on some path) and whether the footers leave room for one.
func (p *parquetFooter) MayHoldNulls(name string) (may bool, n int64, known bool) {
	optional := false
	for _, leaf := range p.leaves[name] {
		path := p.pf.Schema().Columns()[leaf]
		if l, ok := p.pf.Schema().Lookup(path...); ok && l.MaxDefinitionLevel > 0 {
			optional = true
		}
	}
	if !optional {
		return false, 0, true
	}
	if leaves := p.leaves[name]; len(leaves) == 1 {
		if l, ok := p.pf.Schema().Lookup(p.pf.Schema().Columns()[leaves[0]]...); ok && l.MaxRepetitionLevel == 1 {
			n, known = p.listNulls(leaves[0], l.MaxDefinitionLevel)
			return !known || n > 0, n, known
		}
	}
	n, known = p.columnNulls(name)
	return !known || n > 0, n, known
}

// listNulls counts the Arrow nulls of a list column of one leaf (null lists
// and null elements: a column's statistics count empty lists too, which are
// no nulls) from each chunk's definition level histogram (size statistics,
// Parquet 2.10, which pyarrow writes); known is false when a chunk has no
// histogram and its statistics do not record 0.
func (p *parquetFooter) listNulls(leaf, maxDef int) (n int64, known bool) {
	listDef := p.listDef(leaf)
	known = true
	for rg := range p.pf.Metadata().RowGroups {
		k, ok := p.chunkListNulls(rg, leaf, maxDef, listDef, true)
		n += k
		known = known && ok
	}
	return n, known
}

// chunkListNulls is listNulls for the chunk of row group rg. Without a
// histogram, exact asks chunkNulls whether the statistics record 0 (which
// may take arrow-go's parse); otherwise the count is unknown.
func (p *parquetFooter) chunkListNulls(rg, leaf, maxDef, listDef int, exact bool) (n int64, known bool) {
	rgs := p.pf.Metadata().RowGroups
	if rg >= len(rgs) || leaf >= len(rgs[rg].Columns) {
		return 0, false
	}
	if hist := rgs[rg].Columns[leaf].MetaData.SizeStatistics.DefinitionLevelHistogram; len(hist) == maxDef+1 {
		for l, k := range hist {
			if l < listDef || (l > listDef && l < maxDef) {
				n += max(k, 0)
			}
		}
		return n, true
	}
	if !exact {
		return 0, false
	}
	if k, ok := p.chunkNulls(rg, leaf); ok && k == 0 {
		return 0, true
	}
	return 0, false
}

// listDef is the definition level at and above which leaf's row holds a
// list (maybe empty): the optional nodes above its repeated node.
func (p *parquetFooter) listDef(leaf int) int {
	node := parquet.Node(p.pf.Schema())
	lvl := 0
	for _, name := range p.pf.Schema().Columns()[leaf] {
		if node = fieldByName(node, name); node == nil || node.Repeated() {
			break
		}
		if node.Optional() {
			lvl++
		}
	}
	return lvl
}

// checkNulls refuses at plan time a column of file f whose footer records
// nulls that would be an error mid-stream: no fill value, nulls not kept as
// validity, and not a list (whose null counts include empty lists).
func (d *parquetDecoder) checkNulls() error {
	for i := range d.cols {
		c := &d.cols[i]
		if c.fill == nil && !c.keep && (c.kind == kindList || c.kind == kindFixedList) {
			listDef := d.footer.listDef(c.leaf)
			for rg := range d.pf.Metadata().RowGroups {
				if n, ok := d.footer.chunkListNulls(rg, c.leaf, c.maxDef, listDef, false); ok && n > 0 {
					return fmt.Errorf("format: %s row group %d column %q: the footer records %d null lists or null elements: %w; give the column a fill value (null elements become it, null lists become empty), read it over Flight without one (nulls arrive as Arrow nulls), or clean the data",
						d.uri, rg, c.name, n, ErrNull)
				}
			}
		}
		if c.fill != nil || c.keep || c.maxRep > 0 || c.kind == kindBinary {
			continue
		}
		for rg := range d.pf.Metadata().RowGroups {
			for _, leaf := range c.leaves {
				if n := d.footer.recordedNulls(rg, leaf); n > 0 {
					return fmt.Errorf("format: %s row group %d column %q: the footer records %d nulls: %w; give the column a fill value, read it over Flight without one (nulls arrive as Arrow nulls), or clean the data",
						d.uri, rg, c.name, n, ErrNull)
				}
			}
		}
	}
	return nil
}

// NullableField returns f, the output field of a column that may hold
// nulls, made nullable to deliver them as Arrow nulls: a list of
// primitives gets nullable elements, and metadata meshfeed.null_count
// tells the n nulls the footers record, or "unknown" when !known.
func NullableField(f arrow.Field, n int64, known bool) arrow.Field {
	f.Nullable = true
	if primaryList(f.Type) {
		f.Type = nullableElems(f.Type)
	}
	md := map[string]string{nullsMetadataKey: nullsMetadataValue(n, known)}
	for j, k := range f.Metadata.Keys() {
		if k != nullsMetadataKey {
			md[k] = f.Metadata.Values()[j]
		}
	}
	f.Metadata = arrow.MetadataFrom(md)
	return f
}

// primaryList reports whether t is a list type the primary decoder emits
// (list or fixed_size_list of non-nullable primitives).
func primaryList(t arrow.DataType) bool {
	switch tt := t.(type) {
	case *arrow.ListType:
		_, ok := primitiveSize(tt.Elem())
		return ok && !tt.ElemField().Nullable
	case *arrow.FixedSizeListType:
		_, ok := primitiveSize(tt.Elem())
		return ok && !tt.ElemField().Nullable
	}
	return false
}

// nullableElems is list type t with nullable elements.
func nullableElems(t arrow.DataType) arrow.DataType {
	switch tt := t.(type) {
	case *arrow.ListType:
		return arrow.ListOf(tt.Elem())
	case *arrow.FixedSizeListType:
		return arrow.FixedSizeListOf(tt.Len(), tt.Elem())
	}
	return t
}

// nullsMetadata is the field metadata that tells clients what the footers
// say about a column's nulls: the total, or "unknown" where a writer recorded
// no null count (nulls then show up only in the data).
const nullsMetadataKey = "meshfeed.null_count"

func nullsMetadataValue(n int64, known bool) string {
	if !known {
		return "unknown"
	}
	return strconv.FormatInt(n, 10)
}
