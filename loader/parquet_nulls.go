package loader

// Nulls from the footers: each column chunk's statistics may record its null
// count. Planning uses it to refuse, before a data page is read, a column with
// nulls that nothing can stand in for; decoding uses it to keep the fast paths
// for chunks that hold none.

import (
	"fmt"
	"strconv"
)

// chunkNulls is the null count the footer records for leaf column leaf of row
// group rg; known is false when the writer recorded none (or arrow-go
// could not parse the footer).
func (p *parquetFooter) chunkNulls(rg, leaf int) (n int64, known bool) {
	md := p.arrow.md
	if md == nil || rg >= md.NumRowGroups() {
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

// mayHoldNulls reports whether column name can hold nulls at all (an optional
// node on some path) and whether the footers leave room for one.
func (p *parquetFooter) mayHoldNulls(name string) (may bool, n int64, known bool) {
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
	n, known = p.columnNulls(name)
	return !known || n > 0, n, known
}

// checkNulls refuses at plan time a column of file f whose footer records
// nulls that would be an error mid-stream: no fill value, nulls not kept as
// validity, and not a list (whose null counts include empty lists).
func (d *parquetDecoder) checkNulls() error {
	for i := range d.cols {
		c := &d.cols[i]
		if c.fill != nil || c.keep || c.maxRep > 0 || c.kind == kindBinary {
			continue
		}
		for rg := range d.f.RowGroups {
			for _, leaf := range c.leaves {
				if n, ok := d.footer.chunkNulls(rg, leaf); ok && n > 0 {
					return fmt.Errorf("loader: %s row group %d column %q: the footer records %d nulls: %w; give the column a fill value, read it over Flight without one (nulls arrive as Arrow nulls), or clean the data",
						d.f.Object.URI, rg, c.name, n, ErrNull)
				}
			}
		}
	}
	return nil
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
