package feed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/shape"
	"github.com/meshfeed/meshfeed/transport"
)

// packedMixture is a mixture of two tokenized text sources (other
// tokenizers, filters, shuffles), each column col(i) of source i.
func packedMixture(dir string, col func(i int) transport.Column) *transport.Request {
	m := &transport.Mixture{Stop: transport.MixtureStop{Rule: "num_steps", NumSteps: 9}, SourceColumn: "source"}
	for i, f := range []string{`[["id", "<", 60]]`, `[["id", ">=", 60]]`} {
		m.Sources = append(m.Sources, transport.MixtureSource{Datasets: []string{dir + "/*.parquet"}, Weight: float64(i + 2),
			Columns: []transport.Column{col(i)}, Filters: json.RawMessage(f), Shuffle: transport.Shuffle{Enabled: true, Window: 3 + i}})
	}
	return &transport.Request{Version: transport.Version, Mixture: m, GlobalBatchSize: 12, NumSlices: 2, Slices: []int{0, 1},
		LastBatch: transport.LastBatchDrop, Seed: 5}
}

// mixSlices reads every step of req: per step, per slice, one record (the
// slice's parts joined).
func mixSlices(t *testing.T, p *Pipeline, req *transport.Request) [][]arrow.RecordBatch {
	t.Helper()
	st, err := p.Open(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var out [][]arrow.RecordBatch
	for {
		step, err := st.Next(context.Background())
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, sliceRecords(t, step))
		step.Release()
	}
}

// packedSlice is a packed slice as plain rows.
type packedSlice struct{ tokens, seg, pos, src [][]int32 }

// firstFitModel packs the rows of an unpacked slice (ids as list<int32>, the
// source per row) as the contract says, independently of shape: each
// sequence (its first L ids) into the first of ceil(b/r) rows with room,
// segments counted from 1 per row, positions from 0, fill 0, source -1 on
// padding.
func firstFitModel(t *testing.T, rec arrow.RecordBatch, L int, r float64) packedSlice {
	t.Helper()
	lists := rec.Column(0).(*array.List)
	srcs := rec.Column(1).(*array.Int32)
	rows := shape.PackedRows(int(rec.NumRows()), r)
	var out packedSlice
	for range rows {
		out.tokens, out.seg, out.pos = append(out.tokens, nil), append(out.seg, nil), append(out.pos, nil)
		out.src = append(out.src, nil)
	}
	segs := make([]int32, rows)
	vals := lists.ListValues().(*array.Int32).Int32Values()
	for i := range lists.Len() {
		lo, hi := lists.ValueOffsets(i)
		seq := vals[lo:min(hi, lo+int64(L))]
		if len(seq) == 0 {
			continue
		}
		k := slices.IndexFunc(out.tokens, func(row []int32) bool { return len(row)+len(seq) <= L })
		if k < 0 {
			t.Fatalf("model: sequence %d (%d ids) fits no row", i, len(seq))
		}
		segs[k]++
		for j, v := range seq {
			out.tokens[k] = append(out.tokens[k], v)
			out.seg[k] = append(out.seg[k], segs[k])
			out.pos[k] = append(out.pos[k], int32(j))
			out.src[k] = append(out.src[k], srcs.Value(i))
		}
	}
	for k := range out.tokens {
		for len(out.tokens[k]) < L {
			out.tokens[k], out.seg[k] = append(out.tokens[k], 0), append(out.seg[k], 0)
			out.pos[k], out.src[k] = append(out.pos[k], 0), append(out.src[k], -1)
		}
	}
	return out
}

// TestMixturePackedMatchesModel: a packed mixture's slices are the unpacked
// mixture's slices (the existing path: composition in source rows, blocks
// in the seeded order) packed first-fit by a model, with the source per
// token; also after an elastic switch that keeps the packed batch's shape.
func TestMixturePackedMatchesModel(t *testing.T) {
	dir := writeTextDataset(t)
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	p, err := NewPipeline(context.Background(), WithAllocator(mem), WithReadAhead(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const L, r = 400, 1.5
	tok := func(i int) transport.Column {
		c := transport.Column{Name: "text", Tokenizer: filepath.Join(dir, "tokenizer.json")}
		if i == 1 {
			no := false
			c.Tokenizer, c.AddSpecialTokens = filepath.Join(dir, "tokenizer-1.json"), &no
		}
		return c
	}
	packedCol := func(i int) transport.Column {
		c := tok(i)
		c.Length, c.PackRatio, c.Overflow = L, r, "truncate"
		return c
	}
	for _, tc := range []struct {
		name  string
		setup func(req *transport.Request)
	}{
		{"plain", func(*transport.Request) {}},
		// 12 rows: 2 x ceil(6/1.5) == 4 x ceil(3/1.5) == 8 packed rows.
		{"elastic 4->2 at step 3", func(req *transport.Request) {
			req.Elastic = &transport.Elastic{FromSlices: 4, Epoch: 0, Step: 3}
			req.Start.Step = 3
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plain, packed := packedMixture(dir, tok), packedMixture(dir, packedCol)
			tc.setup(plain)
			tc.setup(packed)
			want, got := mixSlices(t, p, plain), mixSlices(t, p, packed)
			defer func() {
				for _, s := range append(want, got...) {
					releaseAll(s)
				}
			}()
			if len(got) != len(want) || len(got) == 0 {
				t.Fatalf("%d packed steps, %d unpacked", len(got), len(want))
			}
			sch := got[0][0].Schema()
			var names []string
			for _, f := range sch.Fields() {
				names = append(names, f.Name)
			}
			fsl := arrow.FixedSizeListOfNonNullable(L, arrow.PrimitiveTypes.Int32)
			if fmt.Sprint(names) != "[text text_segment_ids text_positions source]" || !arrow.TypeEqual(sch.Field(3).Type, fsl) {
				t.Fatalf("packed schema %v, want text, its segment ids and positions, and source as %v", sch, fsl)
			}
			sources := map[int32]int{}
			for s := range got {
				for d := range got[s] {
					m := firstFitModel(t, want[s][d], L, r)
					rec := got[s][d]
					g := packedSlice{fixedRows(rec.Column(0)), fixedRows(rec.Column(1)), fixedRows(rec.Column(2)), fixedRows(rec.Column(3))}
					if rec.NumRows() != int64(shape.PackedRows(6, r)) || fmt.Sprint(g) != fmt.Sprint(m) {
						t.Fatalf("step %d slice %d: packed\n%v\nwant the unpacked slice packed first-fit\n%v", s, d, g, m)
					}
					for _, row := range g.src {
						for _, v := range row {
							sources[v]++
						}
					}
				}
			}
			if sources[0] == 0 || sources[1] == 0 || sources[-1] == 0 {
				t.Fatalf("tokens per source %v: want both sources and padding", sources)
			}
		})
	}
}

// TestMixturePackedRefused: what a packed mixture refuses, at plan time,
// naming what to change.
func TestMixturePackedRefused(t *testing.T) {
	dir := writeTextDataset(t)
	p := newTestPipeline(t, memory.DefaultAllocator)
	col := func(length int, ratio float64) func(int) transport.Column {
		return func(i int) transport.Column {
			return transport.Column{Name: "text", Tokenizer: filepath.Join(dir, "tokenizer.json"), Length: length, PackRatio: ratio, Overflow: "truncate"}
		}
	}
	for _, tc := range []struct {
		name string
		req  *transport.Request
		edit func(req *transport.Request)
		subs []string
	}{
		{"sources pack differently", packedMixture(dir, func(i int) transport.Column { return col(16+8*i, 2)(i) }), nil,
			[]string{"source 1 (", `packs "text" (length 24`, "but source 0 (", `packs "text" (length 16`, "same length, pack_ratio"}},
		{"one source does not pack", packedMixture(dir, func(i int) transport.Column { return col(16, 2*float64(1-i))(i) }), nil,
			[]string{"source 1 (", "packs no column", `source 0 (`}},
		{"concat", packedMixture(dir, col(16, 0)), func(req *transport.Request) {
			for i := range req.Mixture.Sources {
				req.Mixture.Sources[i].Columns[0].Pack = "concat"
			}
		}, []string{`pack "concat" is not supported in a mixture`, "composition counts rows", "counts tokens", "use pack_ratio"}},
		{"pad", packedMixture(dir, col(16, 2)), func(req *transport.Request) {
			req.LastBatch, req.Mixture.Stop = transport.LastBatchPad, transport.MixtureStop{Rule: "first_exhausted"}
		}, []string{`last_batch "pad" does not support`, `use "drop"`}},
		{"unpacked column", packedMixture(dir, col(16, 2)), func(req *transport.Request) {
			for i := range req.Mixture.Sources {
				req.Mixture.Sources[i].Columns = append(req.Mixture.Sources[i].Columns, transport.Column{Name: "id"})
			}
		}, []string{"mixture packing", `"id"`}},
		{"source column taken", packedMixture(dir, col(16, 2)), func(req *transport.Request) {
			req.Mixture.SourceColumn = "text_positions"
		}, []string{`source column "text_positions"`, "choose another source_column"}},
		// 12 rows, ratio 4: 2 x ceil(6/4) = 4 packed rows, 4 x ceil(3/4) = 4: allowed; 3 -> 2: 3 x 1 != 2 x 2.
		{"elastic changes the packed batch", packedMixture(dir, col(16, 4)), func(req *transport.Request) {
			req.Elastic, req.Start.Step = &transport.Elastic{FromSlices: 3, Epoch: 0, Step: 2}, 2
		}, []string{"elastic switch from num_slices 3 to 2 with pack_ratio 4", "3 x ceil(4/4) = 3 rows", "2 x ceil(6/4) = 4 rows"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.edit != nil {
				tc.edit(tc.req)
			}
			_, err := p.Info(context.Background(), tc.req)
			if err == nil || !errors.Is(err, transport.ErrBadRequest) && !errors.Is(err, shape.ErrShape) {
				t.Fatalf("Info: %v, want a bad request", err)
			}
			for _, s := range tc.subs {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
		})
	}
}

// TestMixturePackedOverflow: a slice whose rows do not fit its packed rows
// fails the stream at that step, naming the step, the slice, its sources in
// order and the ratio that would fit; nothing is dropped.
func TestMixturePackedOverflow(t *testing.T) {
	dir := writeTextDataset(t)
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	p := newTestPipeline(t, mem)
	req := packedMixture(dir, func(int) transport.Column {
		return transport.Column{Name: "text", Tokenizer: filepath.Join(dir, "tokenizer.json"), Length: 16, PackRatio: 6, Overflow: "truncate"}
	})
	st, err := p.Open(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, err = st.Next(context.Background())
	if !errors.Is(err, shape.ErrPackOverflow) {
		t.Fatalf("Next: %v, want a packing overflow", err)
	}
	for _, s := range []string{"mixture step 0 slice 0", "packing the slice's 6 rows", "sources in order", "lower the packing ratio", "PackRatio 6: 6 source rows -> 1 packed rows"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
}
