package feed

import (
	"fmt"

	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/transport"
)

// The read-ahead budget and the pieces each slice reads.
//
// Every slice of a stream reads its own rows with its own loader reader,
// under an even share of the stream's read-ahead budget (WithReadAhead). A
// row group that does not fit that share is read in pieces: row ranges of
// whole slices (multiples of b rows, cut on the slice grid, so that with no
// shuffle window a slice inside a row group stays a view), about a quarter
// of the share each, so that one piece is read while the previous ones are
// cut. What a slice needs of its share at least is one slice of rows (b) as
// read (compressed plus decoded), plus the columns the loader cannot stream
// and decodes whole for a row group's pieces (loader.Dataset.
// StreamedRowBytes): a plan whose slices need more than their share is
// refused when it is planned (GetFlightInfo, Open), with the numbers.
//
// The shuffle window is memory of its own, chosen with the window: each
// slice's cutter holds up to W rows decoded (loader.Dataset.ArrowRowBytes)
// beside its share. A window's first slice needs every row of the window, so
// a slice's reader must have the next window read when the current one ends,
// or every slice of the step waits for the rest of it at once (on tabular
// rows, 65,536-row windows and a 16 MiB share: 100-150 ms every window).
// Its reader's budget is therefore at least one window of rows as read
// (windowAhead), which may exceed its share: a stream holds at most the
// read-ahead budget, plus slices x W rows held, plus, where a window costs
// more than a share, slices x (one window read) ahead (plus the steps being
// sent).

// piecePlan is how the slices of a plan read: pieceRows rows per piece (0:
// whole row groups, as the budget allows or with a read-ahead of 0), under
// readerBudget bytes in flight per slice.
type piecePlan struct {
	pieceRows    int64
	readerBudget int64
	windowAhead  int64 // W > 0: what reading one window of rows costs (see above); 0 otherwise
	// shareBytes bounds the pages held to be fetched once for the slices
	// of a stream that read pieces of the same row group (edgeShare): one
	// row group's fetched bytes per pair of neighbouring slices, at most a
	// slice's share; 0 with one slice.
	shareBytes int64
}

// sliceShare returns one slice's even share of a stream's read-ahead
// budget, the stream reading the given number of slices: what planPieces
// sizes its pieces from and what a slice reading whole row groups reads
// under.
func sliceShare(readAhead int64, slices int) int64 {
	return readAhead / int64(max(slices, 1))
}

// budgetFor returns the read-ahead budget of one slice's reader: its share
// of the stream's budget (or, for a slice reading pieces, the part of it
// planPieces leaves in flight), and at least one window of rows.
func (pp piecePlan) budgetFor(share int64, pieces bool) int64 {
	if pieces {
		share = pp.readerBudget
	}
	return max(share, pp.windowAhead)
}

// windowCost returns what reading w rows of ds costs the read-ahead budget:
// w rows at the most bytes per row (compressed plus decoded, from the
// footers) of any row group, plus the columns decoded whole (whole bytes per
// row group) of two row groups: the ones the window starts and ends in. 0
// when w is 0.
func windowCost(ds *loader.Dataset, w, whole int64) int64 {
	if w <= 0 {
		return 0
	}
	var perRow float64
	for _, f := range ds.Files {
		for _, m := range f.RowGroups {
			if m.Rows > 0 {
				perRow = max(perRow, float64(m.Bytes+m.DecodedBytes)/float64(m.Rows))
			}
		}
	}
	return int64(float64(w)*perRow+0.5) + 2*whole
}

// planPieces sizes the pieces of pl's slices from the read-ahead budget, or
// says why the plan cannot fit it. Of a slice's share, the columns decoded
// whole come first; of the rest, a quarter is the piece size (in whole
// slices, at least one), two pieces are what the cutter holds (the one
// being cut and the next), and the remainder is the reader's budget in
// flight. When the rest holds fewer than four slices of rows, pieces are
// one slice and the reader's budget one piece: the slice may then exceed
// its share by up to two slices of rows. The shuffle window is held beside
// the share (see above).
func (p *Pipeline) planPieces(pl *pipelinePlan) (piecePlan, error) {
	budget := p.cfg.readAhead
	if budget <= 0 {
		return piecePlan{}, nil // documented: one row group per slice at a time
	}
	n := int64(len(pl.cfg.slices))
	share := sliceShare(budget, len(pl.cfg.slices))
	perRow, whole := pl.ds.StreamedRowBytes()
	ahead := windowCost(pl.ds, pl.cfg.plan.Window, whole)
	b := int64(pl.plan.SliceRows())
	need := int64(float64(b)*perRow+0.5) + whole
	if need > share {
		costliest := ""
		if ref, cost, ok := pl.ds.CostliestSlice(b); ok {
			costliest = fmt.Sprintf("; the costliest is %s row group %d (%d rows): one slice of its rows needs %d bytes",
				pl.ds.Files[ref.File].Object.URI, ref.Index, ref.Rows, cost)
		}
		return piecePlan{}, fmt.Errorf("feed: %w: the plan does not fit the read-ahead budget: each of the %d slices requested needs at least %d bytes "+
			"(one slice of %d rows read at %.0f bytes per row compressed plus decoded, "+
			"and %d bytes of columns decoded whole per row group), %d bytes for the %d slices, over the read-ahead budget of %d bytes (%d per slice)%s. "+
			"Raise the server's read-ahead to at least %d bytes (meshfeed serve --read-ahead %d; in Go, feed.WithReadAhead; "+
			"for a Loader's local server, meshfeed.ServerOptions(read_ahead=%d)), or lower the global batch size or the slices per request "+
			"(or write row groups with an offset index or fewer rows when columns are decoded whole)",
			transport.ErrFailedPrecondition, n, need, b, perRow, whole, need*n, n, budget, share, costliest, need*n, need*n, need*n)
	}
	if perRow <= 0 {
		return piecePlan{windowAhead: ahead}, nil // nothing streams: pieces would not save memory
	}
	avail := float64(share - whole) // bytes for pieces, held and in flight
	rows := max(int64(avail/perRow/4)/b*b, b)
	pieceBytes := int64(float64(rows)*perRow + 0.5)
	reader := max(int64(avail)-2*pieceBytes, pieceBytes) + whole
	var shared int64
	if n >= 2 {
		var most int64
		for _, f := range pl.ds.Files {
			for _, m := range f.RowGroups {
				most = max(most, m.Bytes)
			}
		}
		shared = min((n-1)*most, share)
	}
	return piecePlan{pieceRows: rows, readerBudget: reader, windowAhead: ahead, shareBytes: shared}, nil
}
