package loader

// What a RowGroupReader does with a piece around its decode: where some of
// its columns' values go (WithReaderInto), and the work on its record right
// after (WithReaderTransform).

import (
	"github.com/apache/arrow-go/v18/arrow"

	"github.com/meshfeed/meshfeed/format"
)

// Transform is work a RowGroupReader does on each record right after
// decoding it (WithReaderTransform): k is the record's place in the order
// read (its index in the refs NewReader was given, unless
// WithReaderMaxPiece splits them), ref what was read. It owns rec: it
// returns rec or another record (releasing rec), or releases rec and
// returns an error, which Next returns in the record's place.
type Transform func(k int, ref RowGroupRef, rec arrow.RecordBatch) (arrow.RecordBatch, error)

// WithReaderTransform makes this reader run f on each record it decodes,
// on the goroutine that decoded it and holding one of its decode slots
// (WithReaderDecodeWorkers), so that the work runs ahead of Next and in
// parallel like decoding (a feed stream tokenizes text columns there, and
// places a mixture's rows in its slices). A piece's transform runs on the
// slot it decoded in, as soon as it is decoded, before the reader's next
// piece decodes there; with one decode worker, pieces are transformed in
// order. Its output is not charged to the read-ahead budget: the caller
// accounts for it. Default: none.
func WithReaderTransform(f Transform) ReaderOption {
	return func(r *RowGroupReader) { r.xform = f }
}

// WithReaderInto makes this reader ask f, before it decodes a piece,
// where the values of some of its columns go (format.Into): those it
// places there are left out of the piece's record (format.Into.Placed),
// which the transform (WithReaderTransform) then completes (a feed stream
// places a mixture's rows in its slices). f returns nil for none. Whole
// row groups (not read in pieces) are decoded as without. Default: none.
func WithReaderInto(f func(ref RowGroupRef) *format.Into) ReaderOption {
	return func(r *RowGroupReader) { r.into = f }
}
