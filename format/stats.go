package format

import "bytes"

// ChunkStats are the statistics a Parquet footer stores for one leaf column
// chunk, as stored: the null count (-1 when the footer does not tell it)
// and the min and max values in the column's physical encoding (nil when
// not stored; the deprecated min/max fields where the newer ones are
// absent). Manifests keep them for planners and filters.
type ChunkStats struct {
	NullCount int64
	Min, Max  []byte
}

// FieldStats returns the statistics of field j's leaf column chunks in row
// group rg, in leaf order: nil for a footer that stores none (Arrow IPC) or
// indexes out of range.
func FieldStats(ft Footer, rg, j int) []ChunkStats {
	p, ok := ft.(*parquetFooter)
	if !ok || j < 0 || j >= len(p.sch.Fields()) {
		return nil
	}
	rgs := p.pf.Metadata().RowGroups
	if rg < 0 || rg >= len(rgs) {
		return nil
	}
	var out []ChunkStats
	for _, leaf := range p.leaves[p.sch.Field(j).Name] {
		if leaf >= len(rgs[rg].Columns) {
			continue
		}
		st := &rgs[rg].Columns[leaf].MetaData.Statistics
		cs := ChunkStats{NullCount: -1, Min: st.MinValue, Max: st.MaxValue}
		if cs.Min == nil && cs.Max == nil {
			cs.Min, cs.Max = st.Min, st.Max
		}
		cs.Min, cs.Max = bytes.Clone(cs.Min), bytes.Clone(cs.Max)
		if n, known := p.chunkNulls(rg, leaf); known {
			cs.NullCount = n
		}
		out = append(out, cs)
	}
	return out
}
