package feed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/transport"
)

// TestSnappedPiecesMatchUnsnapped reads one snappy dataset in pieces (a
// small read-ahead: a slice's pieces are a few steps each, pages hold 1,024
// rows) twice, for two epochs with a shuffle of row groups: with its readers moving the pieces' ends to page breaks
// (loader.WithReaderSnapPieces; each record then covers the pieces it
// spans, or parts of them, and the slice pushes what it covers) and
// without. Every step's slices hold the same rows, and the snapped readers
// decoded fewer pieces than they were given (as many without).
func TestSnappedPiecesMatchUnsnapped(t *testing.T) {
	s := datagen.DefaultSpec()
	s.Rows, s.Files, s.RowGroupRows, s.Features = 30000, 2, 4096, 4
	s.Compression, s.Dictionary, s.PageBytes = datagen.CompressionSnappy, false, 1<<10
	dir := writeDataset(t, s)
	req := &transport.Request{Version: transport.Version, Datasets: []string{dir + "/*.parquet"}, GlobalBatchSize: 256,
		NumSlices: 4, Slices: []int{0, 1, 2, 3}, LastBatch: transport.LastBatchPad, Epochs: 2, Seed: 3,
		Shuffle: transport.Shuffle{Enabled: true}, Columns: []transport.Column{{Name: "id"}, {Name: "label"}}}
	read := func(snap bool) (ids []string, pieces, refs int64) {
		opts := []Option{WithAllocator(checkedMem(t)), WithReadAhead(1 << 17)}
		if !snap {
			opts = append(opts, withoutSnap())
		}
		p, err := NewPipeline(context.Background(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		st, err := p.Open(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		type counts struct{ pieces, refs int64 }
		seen := map[*loader.RowGroupReader]counts{}
		for {
			step, err := st.Next(context.Background())
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, rec := range sliceRecords(t, step) {
				ids = append(ids, fmt.Sprint(rec.Column(0).(*array.Int64).Int64Values()))
				rec.Release()
			}
			step.Release()
			for _, sc := range st.(*pipelineStream).slices {
				if sc.rd != nil && sc.segs != nil {
					seen[sc.rd] = counts{sc.rd.Stats().Pieces.Load(), int64(len(sc.refs))}
				}
			}
		}
		for _, c := range seen {
			pieces, refs = pieces+c.pieces, refs+c.refs
		}
		return ids, pieces, refs
	}
	want, plainPieces, plainRefs := read(false)
	got, pieces, refs := read(true)
	if len(want) == 0 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the snapped stream's slices differ from the unsnapped one's (%d and %d slices)", len(got), len(want))
	}
	t.Logf("pieces decoded for pieces given: snapped %d of %d, not %d of %d", pieces, refs, plainPieces, plainRefs)
	if refs == 0 || pieces >= refs {
		t.Errorf("snapped: %d pieces decoded for %d given: no piece was joined to the next", pieces, refs)
	}
	if plainPieces != plainRefs {
		t.Errorf("not snapped: %d pieces decoded for %d given", plainPieces, plainRefs)
	}
}
