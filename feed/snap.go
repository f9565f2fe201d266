package feed

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/meshfeed/meshfeed/batching"
	"github.com/meshfeed/meshfeed/loader"
)

// Pieces whose ends a reader moved to page breaks
// (loader.WithReaderSnapPieces): a record it returns holds the rows its ref
// names, which may cover several of the pieces it was given, or parts of
// two.

// snapped reports whether a stream's readers may move their pieces' ends:
// where the rows read are the rows pushed (no filter's selection to map
// kept rows to physical ones, no reader transform that knows its refs by
// index).
func snapped(filtered, tokenized, off bool) bool { return !filtered && !tokenized && !off }

// pushRead pushes rec, the rows ref names of the plan's row group g, to
// cut (pushCovering), and returns how many of segs from got on it covered
// (coveredSegs). The caller keeps its reference to rec.
func pushRead(cut slicer, segs []batching.Segment, got, g int, rec arrow.RecordBatch, ref loader.RowGroupRef) (int, error) {
	lo, hi := ref.Start, ref.End
	if lo == 0 && hi == 0 {
		hi = ref.Rows
	}
	if rec.NumRows() != hi-lo {
		return 0, fmt.Errorf("a record of %d rows for rows [%d, %d) (internal error)", rec.NumRows(), lo, hi)
	}
	return coveredSegs(segs, got, g, lo, hi), pushCovering(cut, rec, g, lo, hi)
}

// coveredSegs returns how many of segs from i on a record of rows [lo, hi)
// of the plan's row group g ends: those of g that end in (lo, hi].
func coveredSegs(segs []batching.Segment, i, g int, lo, hi int64) int {
	n := 0
	for i+n < len(segs) && segs[i+n].RowGroup == g && segs[i+n].End <= hi && segs[i+n].End > lo {
		n++
	}
	return n
}

// pushCovering pushes rec, rows [lo, hi) of the plan's row group g, to cut,
// cut at the end of each segment the cutter wants inside it (a view each
// side). The caller keeps its reference to rec.
func pushCovering(cut slicer, rec arrow.RecordBatch, g int, lo, hi int64) error {
	for at := lo; at < hi; {
		end := hi
		if want, ok := cut.Wants(); ok && want.RowGroup == g && want.End > at && want.End < end {
			end = want.End
		}
		part := rec
		if at > lo || end < hi {
			part = rec.NewSlice(at-lo, end-lo)
		}
		err := cut.Push(part, batching.Segment{RowGroup: g, Start: at, End: end})
		if part != rec {
			part.Release()
		}
		if err != nil {
			return err
		}
		at = end
	}
	return nil
}
