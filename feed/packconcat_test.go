package feed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/batching"
	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/tokcount"
	"github.com/meshfeed/meshfeed/tokenize"
	"github.com/meshfeed/meshfeed/transport"
)

// letterTokenizer writes datagen.LetterTokenizer(sep) to a file.
func letterTokenizer(t testing.TB, sep bool) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(path, datagen.LetterTokenizer(sep), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeConcatText writes a text dataset (columns id, text) of docs rows.
func writeConcatText(t *testing.T, docs int64, files int, rgRows int64) string {
	t.Helper()
	dir := t.TempDir()
	var sb strings.Builder
	for sb.Len() < 1<<16 {
		sb.WriteString("The quick brown fox jumps over the lazy dog and a zebra; ")
	}
	spec := datagen.TextSpec{Docs: docs, Files: files, RowGroupRows: rgRows, MinChars: 1, MaxChars: 120, Seed: 5}
	if _, err := datagen.WriteText(context.Background(), datagen.LocalCreator{}, dir, spec, datagen.NewTextSource(sb.String())); err != nil {
		t.Fatal(err)
	}
	return dir
}

// concatRequest asks for column text packed by concatenation.
func concatRequest(dir, tok string, l, bigB, d int, slices []int, policy transport.LastBatch, window int) *transport.Request {
	return &transport.Request{Version: transport.Version, Datasets: []string{dir + "/*.parquet"}, GlobalBatchSize: bigB, NumSlices: d,
		Slices: slices, Seed: 11, Shuffle: transport.Shuffle{Enabled: window > 0, Window: window}, LastBatch: policy, Epochs: 2,
		Columns: []transport.Column{{Name: "text", Tokenizer: tok, Length: l, Pack: PackConcat}}}
}

// modelDocs returns every row's ids under tok, per row group of the
// dataset (in loader.Dataset.RowGroups order), with tokenize.Encode.
func modelDocs(t *testing.T, dir, tokPath string, addSpecial bool) ([]batching.RowGroup, [][][]int32) {
	return modelKeptDocs(t, dir, tokPath, addSpecial, nil)
}

// modelKeptDocs is modelDocs of the rows whose id keep keeps (nil: all),
// without the row groups that keep none (as filters plan them).
func modelKeptDocs(t *testing.T, dir, tokPath string, addSpecial bool, keep func(id int64) bool) ([]batching.RowGroup, [][][]int32) {
	t.Helper()
	ctx := context.Background()
	tok, err := tokenize.Load(tokPath)
	if err != nil {
		t.Fatal(err)
	}
	store, err := objstore.NewStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ds, err := loader.Open(ctx, store, []string{dir + "/*.parquet"}, loader.WithColumns("id", "text"))
	if err != nil {
		t.Fatal(err)
	}
	var rgs []batching.RowGroup
	var ids [][][]int32
	for _, r := range ds.RowGroups() {
		rec, err := ds.ReadRowGroup(ctx, r.File, r.Index, memory.DefaultAllocator)
		if err != nil {
			t.Fatal(err)
		}
		col, idCol := rec.Column(1).(*array.String), rec.Column(0).(*array.Int64)
		var rows [][]int32
		for i := range col.Len() {
			if keep != nil && !keep(idCol.Value(i)) {
				continue
			}
			e, err := tok.Encode(col.Value(i), addSpecial)
			if err != nil {
				t.Fatal(err)
			}
			rows = append(rows, e)
		}
		rec.Release()
		if len(rows) > 0 {
			rgs = append(rgs, batching.RowGroup{File: r.File, Index: r.Index, Rows: int64(len(rows))})
			ids = append(ids, rows)
		}
	}
	return rgs, ids
}

// concatModel is the tokens, segment ids and positions of every packed row
// of an epoch, built the obvious way: the documents in the order of the row
// plan with D = 1, each followed by eod, cut into rows of l.
func concatModelRows(t *testing.T, rgs []batching.RowGroup, ids [][][]int32, cfg batching.Config, epoch, l int, eod int32) (toks, segs, pos [][]int32) {
	t.Helper()
	docs, err := batching.NewPlan(rgs, batching.Config{GlobalBatch: 1, D: 1, Seed: cfg.Seed, ShuffleRowGroups: cfg.ShuffleRowGroups, Window: cfg.Window})
	if err != nil {
		t.Fatal(err)
	}
	var seq []int32
	var docOf []int64
	for q := int64(0); q < docs.N(); q++ {
		g, row, _ := docs.SourceRow(epoch, 0, q)
		seq = append(append(seq, ids[g][row]...), eod)
		for range len(ids[g][row]) + 1 {
			docOf = append(docOf, q)
		}
	}
	for at := 0; at < len(seq); at += l {
		tr, sr, pr := make([]int32, l), make([]int32, l), make([]int32, l)
		var seg, p int32
		prev := int64(-1)
		for c := 0; c < l && at+c < len(seq); c++ {
			if docOf[at+c] != prev {
				seg, p, prev = seg+1, 0, docOf[at+c]
			}
			tr[c], sr[c], pr[c] = seq[at+c], seg, p
			p++
		}
		toks, segs, pos = append(toks, tr), append(segs, sr), append(pos, pr)
	}
	return toks, segs, pos
}

// streamRows reads every step of a stream: per (epoch, step, slice) the
// slice's rows of the three columns, and the mask when there is one.
type concatStep struct {
	epoch, step, slice int
	toks, segs, pos    [][]int32
	real               int
}

func readConcatStream(t *testing.T, p *Pipeline, req *transport.Request) []concatStep {
	t.Helper()
	return readConcatSteps(t, p, req, -1)
}

// readConcatSteps reads up to limit steps (-1: all) of req's stream.
func readConcatSteps(t *testing.T, p *Pipeline, req *transport.Request, limit int) []concatStep {
	t.Helper()
	ctx := context.Background()
	st, err := p.Open(ctx, req)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer st.Close()
	var out []concatStep
	for n := 0; n != limit; n++ {
		step, err := st.Next(ctx)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		for i, rec := range step.Slices {
			cs := concatStep{epoch: step.Meta.Epoch, step: step.Meta.Step, slice: step.Meta.Slices[i], real: step.Meta.RealRows[i]}
			for c, dst := range []*[][]int32{&cs.toks, &cs.segs, &cs.pos} {
				fl := rec.Column(c).(*array.FixedSizeList)
				vals := fl.ListValues().(*array.Int32).Int32Values()
				n := int(fl.DataType().(*arrow.FixedSizeListType).Len())
				for r := range int(rec.NumRows()) {
					*dst = append(*dst, slices.Clone(vals[r*n:(r+1)*n]))
				}
			}
			out = append(out, cs)
		}
		step.Release()
	}
	return out
}

// TestConcatStreamAgainstModel streams concatenated packing and checks every
// slice of every step of two epochs against a model made of tokenize.Encode
// on every row; serving the slices from two "processes" and resuming
// mid-epoch give the same slices.
func TestConcatStreamAgainstModel(t *testing.T) {
	dir := writeConcatText(t, 57, 2, 7)
	tokPath := letterTokenizer(t, true)
	for _, tc := range []struct {
		name          string
		l, bigB, d    int
		policy        transport.LastBatch
		window        int
		noSpecial     bool
		firstSlices   []int
		resumeAtEpoch int
	}{
		{"shuffled window, drop", 16, 4, 2, transport.LastBatchDrop, 5, false, []int{0}, 1},
		{"file order, pad", 7, 3, 3, transport.LastBatchPad, 0, false, []int{0, 2}, 0},
		{"no special tokens, one slice", 32, 2, 1, transport.LastBatchDrop, 0, true, []int{0}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newConcatPipeline(t)
			all := make([]int, tc.d)
			for i := range all {
				all[i] = i
			}
			req := concatRequest(dir, tokPath, tc.l, tc.bigB, tc.d, all, tc.policy, tc.window)
			if tc.noSpecial {
				no := false
				req.Columns[0].AddSpecialTokens = &no
			}
			got := readConcatStream(t, p, req)
			rgs, ids := modelDocs(t, dir, tokPath, !tc.noSpecial)
			pol, _ := policyOf(tc.policy)
			cfg := batching.Config{GlobalBatch: tc.bigB, D: tc.d, Seed: 11, ShuffleRowGroups: tc.window > 0, Window: int64(tc.window), Policy: pol}
			checkConcatSteps(t, got, rgs, ids, cfg, tc.l)
			if st := p.TokenCountStats(); st.Counted.Load() != 2 {
				t.Errorf("files counted %d, want 2 (once each, then cached)", st.Counted.Load())
			}
			// Two processes, then a resume in the middle of an epoch.
			var rest []int
			for _, d := range all {
				if !slices.Contains(tc.firstSlices, d) {
					rest = append(rest, d)
				}
			}
			sub := func(ss []int) *transport.Request {
				r := concatRequest(dir, tokPath, tc.l, tc.bigB, tc.d, ss, tc.policy, tc.window)
				r.Columns = req.Columns
				return r
			}
			a := readConcatStream(t, p, sub(tc.firstSlices))
			if rest != nil {
				a = append(a, readConcatStream(t, p, sub(rest))...)
			}
			if !sameSteps(a, got) {
				t.Errorf("two processes' slices differ from one's")
			}
			steps := 0
			for _, s := range got {
				steps = max(steps, s.step+1)
			}
			rq := concatRequest(dir, tokPath, tc.l, tc.bigB, tc.d, all, tc.policy, tc.window)
			rq.Columns = req.Columns
			rq.Start = transport.Position{Epoch: tc.resumeAtEpoch, Step: steps / 2}
			resumed := readConcatStream(t, p, rq)
			var want []concatStep
			for _, s := range got {
				if s.epoch > rq.Start.Epoch || (s.epoch == rq.Start.Epoch && s.step >= rq.Start.Step) {
					want = append(want, s)
				}
			}
			if !sameSteps(resumed, want) {
				t.Errorf("resumed at %+v: %d slices, want the %d of the uninterrupted run from there", rq.Start, len(resumed), len(want))
			}
			// Unbounded (epochs 0): the same two epochs, then the third goes on.
			rq.Start, rq.Epochs = transport.Position{}, 0
			more := readConcatSteps(t, p, rq, 2*steps+1)
			if len(more) != len(got)+tc.d || !sameSteps(more[:len(got)], got) || more[len(got)].epoch != 2 {
				t.Errorf("unbounded stream: %d slices, want the %d of two epochs and %d of the third", len(more), len(got), tc.d)
			}
		})
	}
}

// sameSteps reports whether a and b hold the same slices (in any order).
func sameSteps(a, b []concatStep) bool {
	if len(a) != len(b) {
		return false
	}
	key := func(s concatStep) [3]int { return [3]int{s.epoch, s.step, s.slice} }
	byKey := map[[3]int]concatStep{}
	for _, s := range b {
		byKey[key(s)] = s
	}
	for _, s := range a {
		w, ok := byKey[key(s)]
		if !ok || s.real != w.real || !equalRows(s.toks, w.toks) || !equalRows(s.segs, w.segs) || !equalRows(s.pos, w.pos) {
			return false
		}
	}
	return true
}

func equalRows(a, b [][]int32) bool {
	return slices.EqualFunc(a, b, func(x, y []int32) bool { return slices.Equal(x, y) })
}

// checkConcatSteps compares the slices read with the model: slice d of step
// s is packed rows [s*b, (s+1)*b) of stream d, R packed rows split as rows.
func checkConcatSteps(t *testing.T, got []concatStep, rgs []batching.RowGroup, ids [][][]int32, cfg batching.Config, l int) {
	t.Helper()
	b := cfg.GlobalBatch / cfg.D
	if len(got) == 0 {
		t.Fatal("no steps")
	}
	for epoch := range 2 {
		toks, segs, pos := concatModelRows(t, rgs, ids, cfg, epoch, l, 2)
		r := len(toks)
		n := 0
		for _, s := range got {
			if s.epoch != epoch {
				continue
			}
			n++
			d := s.slice
			start := d*(r/cfg.D) + min(d, r%cfg.D)
			length := r / cfg.D
			if d < r%cfg.D {
				length++
			}
			for i := range b {
				row := s.step*b + i
				if row >= length {
					if i < s.real || slices.ContainsFunc(s.segs[i], func(v int32) bool { return v != 0 }) {
						t.Fatalf("epoch %d step %d slice %d row %d: past the stream's %d rows but not padding", epoch, s.step, d, i, length)
					}
					continue
				}
				g := start + row
				if !slices.Equal(s.toks[i], toks[g]) || !slices.Equal(s.segs[i], segs[g]) || !slices.Equal(s.pos[i], pos[g]) {
					t.Fatalf("epoch %d step %d slice %d row %d (packed row %d of %d):\n tokens %v\n want   %v\n segs %v\n want %v\n pos  %v\n want %v",
						epoch, s.step, d, i, g, r, s.toks[i], toks[g], s.segs[i], segs[g], s.pos[i], pos[g])
				}
			}
		}
		want := r / cfg.GlobalBatch // drop
		if cfg.Policy == batching.Pad {
			want = (r + cfg.GlobalBatch - 1) / cfg.GlobalBatch
		}
		if n != want*cfg.D {
			t.Fatalf("epoch %d: %d slices, want %d steps of %d slices (R=%d packed rows, B=%d)", epoch, n, want, cfg.D, r, cfg.GlobalBatch)
		}
	}
}

// TestConcatBadInput: each request concatenated packing cannot serve is
// refused when planned (InvalidArgument), naming the column and what to do.
func TestConcatBadInput(t *testing.T) {
	dir := writeConcatText(t, 20, 1, 5)
	withSep, noSep := letterTokenizer(t, true), letterTokenizer(t, false)
	ctx := context.Background()
	p := newConcatPipeline(t)
	base := func() *transport.Request {
		return concatRequest(dir, withSep, 8, 2, 1, []int{0}, transport.LastBatchDrop, 0)
	}
	for _, tc := range []struct {
		name string
		edit func(r *transport.Request)
		want []string
	}{
		{"no end-of-document token", func(r *transport.Request) { r.Columns[0].Tokenizer = noSep },
			[]string{noSep, `column "text"`, "name one with eod_token=", "<|endoftext|>"}},
		{"eod_token the tokenizer lacks", func(r *transport.Request) { r.Columns[0].EODToken = "<nope>" },
			[]string{`eod_token "<nope>" is not a token of tokenizer`, withSep}},
		{"no tokenizer", func(r *transport.Request) { r.Columns[0].Tokenizer = "" },
			[]string{`columns[0] "text": pack "concat" needs a tokenizer`}},
		{"no length", func(r *transport.Request) { r.Columns[0].Length = 0 },
			[]string{`columns[0] "text": pack "concat" needs a length`}},
		{"another column", func(r *transport.Request) { r.Columns = append(r.Columns, transport.Column{Name: "id"}) },
			[]string{"request this column alone"}},
		{"pack_ratio too", func(r *transport.Request) { r.Columns[0].PackRatio = 2 },
			[]string{"pack_ratio 2 are two packings"}},
		{"not a string column", func(r *transport.Request) { r.Columns[0].Name = "id" },
			[]string{`column "id"`, "a tokenizer reads a string or large_string column"}},
		{"in a mixture", func(r *transport.Request) {
			r.Mixture = &transport.Mixture{Sources: []transport.MixtureSource{{Datasets: r.Datasets, Columns: r.Columns, Weight: 1}},
				Stop: transport.MixtureStop{Rule: "num_steps", NumSteps: 1}}
			r.Datasets, r.Columns, r.Shuffle, r.Epochs = nil, nil, transport.Shuffle{}, 1
		}, []string{`pack "concat" is not supported in a mixture`, "use pack_ratio"}},
	} {
		req := base()
		tc.edit(req)
		_, err := p.Info(ctx, req)
		if !errors.Is(err, transport.ErrBadRequest) {
			t.Errorf("%s: Info = %v, want ErrBadRequest", tc.name, err)
			continue
		}
		if missing := containsAll(err.Error(), tc.want...); len(missing) > 0 {
			t.Errorf("%s: Info = %v, lacks %q", tc.name, err, missing)
		}
	}
}

// rowKeys returns the real packed rows of the slices of epoch, each as a
// key (tokens, segment ids, positions), counted.
func rowKeys(steps []concatStep, epoch int) map[string]int {
	out := map[string]int{}
	for _, s := range steps {
		if s.epoch != epoch {
			continue
		}
		for i := range s.real {
			out[fmt.Sprint(s.toks[i], s.segs[i], s.pos[i])]++
		}
	}
	return out
}

// TestConcatElastic: a run that switches from 2 slices to 4 (and from 3 to
// 1) in the middle of an epoch delivers that epoch's packed rows exactly
// once across the switch, in the same number of steps, then the plain plan
// with the new degree.
func TestConcatElastic(t *testing.T) {
	dir := writeConcatText(t, 57, 2, 7)
	tokPath := letterTokenizer(t, true)
	p := newConcatPipeline(t)
	all := func(d int) []int {
		out := make([]int, d)
		for i := range out {
			out[i] = i
		}
		return out
	}
	for _, tc := range []struct {
		from, to, bigB int
		policy         transport.LastBatch
		window         int
	}{{2, 4, 4, transport.LastBatchDrop, 5}, {3, 1, 6, transport.LastBatchPad, 0}} {
		before := readConcatStream(t, p, concatRequest(dir, tokPath, 8, tc.bigB, tc.from, all(tc.from), tc.policy, tc.window))
		fresh := readConcatStream(t, p, concatRequest(dir, tokPath, 8, tc.bigB, tc.to, all(tc.to), tc.policy, tc.window))
		steps := 0
		for _, s := range before {
			steps = max(steps, s.step+1)
		}
		k := steps / 2
		req := concatRequest(dir, tokPath, 8, tc.bigB, tc.to, all(tc.to), tc.policy, tc.window)
		req.Start = transport.Position{Epoch: 0, Step: k}
		req.Elastic = &transport.Elastic{FromSlices: tc.from, Epoch: 0, Step: k}
		after := readConcatStream(t, p, req)
		var got, next, want []concatStep
		for _, s := range before {
			if s.epoch == 0 && s.step < k {
				got = append(got, s)
			}
		}
		for _, s := range after {
			switch {
			case s.epoch == 0 && (s.step < k || s.step >= steps):
				t.Fatalf("from %d to %d: elastic step %d outside [%d, %d)", tc.from, tc.to, s.step, k, steps)
			case s.epoch == 0:
				got = append(got, s)
			default:
				next = append(next, s)
			}
		}
		if g, w := rowKeys(got, 0), rowKeys(before, 0); !maps.Equal(g, w) {
			t.Errorf("from %d to %d at step %d: epoch 0 delivers %d distinct rows, want each of the %d of the uninterrupted run once", tc.from, tc.to, k, len(g), len(w))
		}
		for _, s := range fresh {
			if s.epoch == 1 {
				want = append(want, s)
			}
		}
		if !sameSteps(next, want) {
			t.Errorf("from %d to %d: epoch 1 after the switch differs from a fresh run with %d slices", tc.from, tc.to, tc.to)
		}
	}
}

// TestConcatIndexMismatch: counts that do not match the file (a stale or
// foreign index) fail the stream at the first document that differs,
// naming it, instead of shifting every token after it.
func TestConcatIndexMismatch(t *testing.T) {
	dir := writeConcatText(t, 20, 1, 5)
	tokPath := letterTokenizer(t, true)
	ctx := context.Background()
	p := newConcatPipeline(t)
	req := concatRequest(dir, tokPath, 8, 2, 1, []int{0}, transport.LastBatchDrop, 0)
	pl, err := p.planFor(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	f := pl.ds.Files[0]
	key := tokcount.Key{Tokenizer: pl.concat.tok.Hash(), Column: "text", AddSpecial: true}.String()
	good, _ := p.cfg.tokenCounts.Get(f.Object.CacheKey(), key)
	bad := &tokcount.Counts{}
	for _, rg := range good.RowGroups {
		bad.RowGroups = append(bad.RowGroups, slices.Clone(rg))
	}
	bad.RowGroups[0][2]++
	p.cfg.tokenCounts.Put(f.Object.CacheKey(), key, bad)
	st, err := p.Open(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for {
		step, err := st.Next(ctx)
		if err == nil {
			step.Release()
			continue
		}
		if !errors.Is(err, transport.ErrFailedPrecondition) || len(containsAll(err.Error(), f.Object.URI, "row group 0 row 2", "token-count index planned", "meshfeed index")) > 0 {
			t.Fatalf("Next = %v, want a FailedPrecondition naming the file, row group 0 row 2 and the index", err)
		}
		return
	}
}

// newConcatPipeline returns a Pipeline closed when the test ends.
func newConcatPipeline(t *testing.T) *Pipeline {
	t.Helper()
	p, err := NewPipeline(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestConcatFilters: with filters, the documents are the kept rows: the
// stream equals the model of the kept rows alone (row groups that keep
// none left out), and resuming mid-epoch gives the same slices.
func TestConcatFilters(t *testing.T) {
	dir := writeConcatText(t, 57, 2, 7)
	tokPath := letterTokenizer(t, true)
	p := newConcatPipeline(t)
	keep := func(id int64) bool { return id >= 5 && (id < 14 || id > 29) && id != 40 }
	req := concatRequest(dir, tokPath, 8, 4, 2, []int{0, 1}, transport.LastBatchPad, 3)
	req.Filters = json.RawMessage(`[["id", ">=", 5], ["id", "not in", [14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 40]]]`)
	got := readConcatStream(t, p, req)
	rgs, ids := modelKeptDocs(t, dir, tokPath, true, keep)
	cfg := batching.Config{GlobalBatch: 4, D: 2, Seed: 11, ShuffleRowGroups: true, Window: 3, Policy: batching.Pad}
	checkConcatSteps(t, got, rgs, ids, cfg, 8)
	req.Start = transport.Position{Epoch: 1, Step: 3}
	var want []concatStep
	for _, s := range got {
		if s.epoch == 1 && s.step >= 3 {
			want = append(want, s)
		}
	}
	if resumed := readConcatStream(t, p, req); !sameSteps(resumed, want) {
		t.Errorf("resumed at epoch 1 step 3: %d slices, want the %d of the uninterrupted run", len(resumed), len(want))
	}
}

// GetFlightInfo's answer for a concatenated column: R packed rows, the
// steps from them, and the tokenizer's SHA-256 (the client's state names
// it).
func TestConcatInfo(t *testing.T) {
	dir := writeConcatText(t, 20, 1, 5)
	tokPath := letterTokenizer(t, true)
	p := newConcatPipeline(t)
	info, err := p.Info(context.Background(), concatRequest(dir, tokPath, 8, 2, 1, []int{0}, transport.LastBatchDrop, 0))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenize.Load(tokPath)
	if err != nil {
		t.Fatal(err)
	}
	if info.Tokenizers["text"] != tok.Hash() || info.StepsPerEpoch != info.NumRows/2 || info.DroppedRows != info.NumRows%2 {
		t.Errorf("Info = rows %d, steps %d, dropped %d, tokenizers %v; want steps R/2, R mod 2 dropped, text: %s",
			info.NumRows, info.StepsPerEpoch, info.DroppedRows, info.Tokenizers, tok.Hash())
	}
}
