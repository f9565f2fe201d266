package batching

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

// concatModel is the epoch of a concatenated plan built the obvious way:
// every document's tokens and its end token, in the document plan's order,
// one sequence; doc[i] is the document of token i.
type concatModel struct {
	toks []int32
	doc  []int64
}

const testEOD = -7

// docToken is the synthetic j-th token of row row of row group g.
func docToken(g int, row, j int64) int32 { return int32(g*1_000_000 + int(row)*1000 + int(j)) }

func buildConcatModel(t *testing.T, p *ConcatPlan, epoch int) concatModel {
	t.Helper()
	var m concatModel
	for q := int64(0); q < p.N(); q++ {
		g, row, ok := p.docs.SourceRow(epoch, 0, q)
		if !ok {
			t.Fatalf("no row at document %d", q)
		}
		for j := int64(0); j < int64(p.counts[g][row]); j++ {
			m.toks = append(m.toks, docToken(g, row, j))
			m.doc = append(m.doc, q)
		}
		m.toks = append(m.toks, testEOD)
		m.doc = append(m.doc, q)
	}
	return m
}

// slice returns the model's tokens, segment ids and positions of packed
// rows [r0, r0+rows): rows past R are padding.
func (m concatModel) slice(r0, rows, l int64) (toks, segs, pos []int32) {
	for r := r0; r < r0+rows; r++ {
		var seg, at int32
		prev := int64(-1)
		for c := int64(0); c < l; c++ {
			i := r*l + c
			if i >= int64(len(m.toks)) {
				toks, segs, pos = append(toks, 0), append(segs, 0), append(pos, 0)
				continue
			}
			if m.doc[i] != prev {
				seg, at, prev = seg+1, 0, m.doc[i]
			}
			toks, segs, pos = append(toks, m.toks[i]), append(segs, seg), append(pos, at)
			at++
		}
	}
	return toks, segs, pos
}

// randomCounts draws each row's token count: empty documents, short ones
// and ones longer than L.
func randomCounts(r *rand.Rand, rows []int64, l int) [][]int32 {
	out := make([][]int32, len(rows))
	for i, n := range rows {
		out[i] = make([]int32, n)
		for j := range out[i] {
			switch r.IntN(5) {
			case 0:
				out[i][j] = 0
			case 1:
				out[i][j] = int32(r.IntN(3*l) + l)
			default:
				out[i][j] = int32(r.IntN(l + 1))
			}
		}
	}
	return out
}

// packSlice packs slice d of step through the plan's functions alone.
func packSlice(p *ConcatPlan, epoch, step, d int) (toks, segs, pos []int32) {
	lo, hi := p.SliceTokens(step, d)
	n := p.SliceRows() * p.Length()
	toks, segs, pos = make([]int32, n), make([]int32, n), make([]int32, n)
	ids := func(r DocRun) []int32 {
		out := make([]int32, r.Tokens)
		for j := range out {
			out[j] = docToken(r.RowGroup, r.Row, int64(j))
		}
		return out
	}
	PackRuns(p.Runs(epoch, lo, hi), p.Length(), ids, testEOD, 0, toks, segs, pos)
	return toks, segs, pos
}

// TestConcatPlanProperties holds concatenated packing to its contract over
// random documents, L, B, D, shuffles and policies: T and R from the
// counts; the streams split R as rows are split; every step's slices equal
// the model (tokens, segment ids, positions), so every token of an epoch is
// delivered once, in order (Drop: but the dropped tails); resuming at a
// random step reads from the documents holding its first token and gives
// the same slices; a second plan queried in another order agrees.
func TestConcatPlanProperties(t *testing.T) {
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, 0xc0ca7))
	for iter := 0; iter < 300; iter++ {
		rows := randomRows(r)
		var n int64
		for _, k := range rows {
			n += k
		}
		if n == 0 {
			continue
		}
		rgs := make([]RowGroup, len(rows))
		for i, k := range rows {
			rgs[i] = RowGroup{File: i / 3, Index: i % 3, Rows: k}
		}
		l := []int{1, 2, 5, 16}[r.IntN(4)]
		counts := randomCounts(r, rows, l)
		cfg := randomConfig(r, n)
		p, err := NewConcatPlan(rgs, counts, cfg, l)
		if errors.Is(err, ErrNoSteps) || errors.Is(err, ErrIndivisible) {
			continue
		}
		if err != nil {
			t.Fatalf("iter %d: NewConcatPlan: %v", iter, err)
		}
		var tt int64
		for _, c := range counts {
			for _, k := range c {
				tt += int64(k) + 1
			}
		}
		if p.Tokens() != tt || p.Rows() != (tt+int64(l)-1)/int64(l) {
			t.Fatalf("iter %d: T=%d R=%d, want T=%d R=%d", iter, p.Tokens(), p.Rows(), tt, (tt+int64(l)-1)/int64(l))
		}
		epoch := r.IntN(3)
		m := buildConcatModel(t, p, epoch)
		b := int64(p.SliceRows())
		next := int64(0) // next token the streams deliver, in stream order
		for d := 0; d < cfg.D; d++ {
			start := int64(0)
			for e := 0; e < d; e++ {
				start += p.RowsPlan().StreamLen(e)
			}
			for s := 0; s < p.StepsPerEpoch(); s++ {
				gt, gs, gp := packSlice(p, epoch, s, d)
				real := int64(p.SliceReal(s, d))
				wt, ws, wp := m.slice(start+int64(s)*b, real, int64(l))
				pad := make([]int32, (b-real)*int64(l))
				wt, ws, wp = append(wt, pad...), append(ws, pad...), append(wp, pad...)
				if !slices.Equal(gt, wt) || !slices.Equal(gs, ws) || !slices.Equal(gp, wp) {
					t.Fatalf("iter %d (L=%d cfg=%+v) epoch %d step %d slice %d:\n tokens %v\n want   %v\n segs %v\n want %v\n pos  %v\n want %v",
						iter, l, cfg, epoch, s, d, gt, wt, gs, ws, gp, wp)
				}
				lo, hi := p.SliceTokens(s, d)
				if lo != hi && lo != next {
					t.Fatalf("iter %d: slice %d step %d starts at token %d, want %d", iter, d, s, lo, next)
				}
				if lo != hi {
					next = hi
				}
			}
			// Drop: the stream's undelivered tail is skipped.
			next = min(p.Tokens(), (start+p.RowsPlan().StreamLen(d))*int64(l))
		}
		if next != p.Tokens() {
			t.Fatalf("iter %d: the streams end at token %d of %d", iter, next, p.Tokens())
		}
		checkConcatResume(t, r, p, epoch, iter)
	}
}

// checkConcatResume resumes every stream at a random step: the documents
// it reads start at the window of the one holding the step's first token,
// every run of the later steps lies in what is read, and a second plan
// (fresh caches, another epoch queried first) gives the same slices.
func checkConcatResume(t *testing.T, r *rand.Rand, p *ConcatPlan, epoch, iter int) {
	t.Helper()
	q, err := NewConcatPlan(p.docs.RowGroups(), p.counts, p.cfg, p.Length())
	if err != nil {
		t.Fatal(err)
	}
	q.Runs(epoch+1, 0, q.Tokens())
	for d := 0; d < p.cfg.D; d++ {
		step := r.IntN(p.StepsPerEpoch() + 1)
		lo, hi := p.StreamTokens(Position{Epoch: epoch, Step: step}, d)
		q0, q1, r0, r1 := p.DocRange(epoch, lo, hi)
		if lo < hi {
			if first := p.Runs(epoch, lo, lo+1)[0]; first.Doc != q0 || r0 != p.WindowStart(q0) {
				t.Fatalf("iter %d: resume slice %d step %d reads from document %d (window %d), want %d (%d)", iter, d, step, q0, r0, first.Doc, p.WindowStart(first.Doc))
			}
		}
		for s := step; s < p.StepsPerEpoch(); s++ {
			a, b := p.SliceTokens(s, d)
			for _, run := range p.Runs(epoch, a, b) {
				if run.Doc < q0 || run.Doc >= q1 || run.Raw < r0 || run.Raw >= r1 {
					t.Fatalf("iter %d: slice %d step %d needs document %d (raw %d) outside the read range [%d, %d) raw [%d, %d)",
						iter, d, s, run.Doc, run.Raw, q0, q1, r0, r1)
				}
			}
			gt, gs, gp := packSlice(q, epoch, s, d)
			wt, ws, wp := packSlice(p, epoch, s, d)
			if !slices.Equal(gt, wt) || !slices.Equal(gs, ws) || !slices.Equal(gp, wp) {
				t.Fatalf("iter %d: two plans disagree on slice %d step %d", iter, d, s)
			}
		}
	}
}

// TestConcatPlanErrors: bad lengths, counts that do not fit the row groups,
// and the policies' refusals in packed rows.
func TestConcatPlanErrors(t *testing.T) {
	rgs := []RowGroup{{Rows: 3}}
	counts := [][]int32{{3, 0, 4}} // T = 10
	for _, tc := range []struct {
		name   string
		counts [][]int32
		cfg    Config
		l      int
		want   error
	}{
		{"zero length", counts, Config{GlobalBatch: 1, D: 1}, 0, ErrInvalidConfig},
		{"counts of another row count", [][]int32{{1}}, Config{GlobalBatch: 1, D: 1}, 4, ErrInvalidRowGroup},
		{"negative count", [][]int32{{1, -1, 2}}, Config{GlobalBatch: 1, D: 1}, 4, ErrInvalidRowGroup},
		{"drop with R < B", counts, Config{GlobalBatch: 4, D: 1, Policy: Drop}, 4, ErrNoSteps}, // R = 3
		{"raise with R % B != 0", counts, Config{GlobalBatch: 2, D: 1, Policy: Raise}, 4, ErrIndivisible},
	} {
		_, err := NewConcatPlan(rgs, tc.counts, tc.cfg, tc.l)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: NewConcatPlan = %v, want %v", tc.name, err, tc.want)
		}
	}
	p, err := NewConcatPlan(rgs, counts, Config{GlobalBatch: 2, D: 2, Policy: Pad}, 4)
	if err != nil {
		t.Fatal(err)
	}
	if p.Tokens() != 10 || p.Rows() != 3 || p.StepsPerEpoch() != 2 || p.RowsPlan().PaddedRows() != 1 {
		t.Errorf("T=%d R=%d steps=%d padded=%d, want 10 3 2 1", p.Tokens(), p.Rows(), p.StepsPerEpoch(), p.RowsPlan().PaddedRows())
	}
}

// TestConcatRemainderRows: after an elastic switch from D to D' at step k,
// the packed rows each new slice holds at each step are the contract's
// remainder (each old stream's undelivered rows in order, re-split over D'
// streams), computed here from the old streams' lengths alone; packed, they
// are the model's rows.
func TestConcatRemainderRows(t *testing.T) {
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, 0xe1a5))
	checked := 0
	for iter := 0; iter < 300; iter++ {
		rows := randomRows(r)
		var n int64
		for _, k := range rows {
			n += k
		}
		if n == 0 {
			continue
		}
		rgs := make([]RowGroup, len(rows))
		for i, k := range rows {
			rgs[i] = RowGroup{Rows: k}
		}
		l := []int{1, 3, 8}[r.IntN(3)]
		cfg := randomConfig(r, n)
		p, err := NewConcatPlan(rgs, randomCounts(r, rows, l), cfg, l)
		if err != nil {
			continue
		}
		var divs []int
		for f := 1; f <= cfg.GlobalBatch && f <= 8; f++ {
			if cfg.GlobalBatch%f == 0 && int64(f) <= p.Rows() {
				divs = append(divs, f)
			}
		}
		from, k, epoch := divs[r.IntN(len(divs))], r.IntN(p.StepsPerEpoch()+1), r.IntN(2)
		rem, err := p.RowsPlan().Remainder(Switch{FromD: from, Epoch: epoch, Step: k})
		if err != nil {
			t.Fatalf("iter %d: Remainder: %v", iter, err)
		}
		// The model: the old streams' undelivered rows, in order.
		bOld, bNew := int64(cfg.GlobalBatch/from), int64(p.SliceRows())
		var seq []int64
		for od := int64(0); od < int64(from); od++ {
			length := p.Rows() / int64(from)
			if od < p.Rows()%int64(from) {
				length++
			}
			start := od*(p.Rows()/int64(from)) + min(od, p.Rows()%int64(from))
			end := length
			if cfg.Policy != Pad {
				end = min(length, int64(p.StepsPerEpoch())*bOld)
			}
			for q := int64(k) * bOld; q < end; q++ {
				seq = append(seq, start+q)
			}
		}
		m := buildConcatModel(t, p, epoch)
		m2 := int64(len(seq))
		for d := 0; d < cfg.D; d++ {
			i := int64(d)
			lo := i*(m2/int64(cfg.D)) + min(i, m2%int64(cfg.D))
			length := m2 / int64(cfg.D)
			if i < m2%int64(cfg.D) {
				length++
			}
			for s := k; s < p.StepsPerEpoch(); s++ {
				var got []int64
				for _, rr := range p.RemainderRows(rem, s, d) {
					for g := rr[0]; g < rr[1]; g++ {
						got = append(got, g)
					}
				}
				a := min(length, int64(s-k)*bNew)
				want := seq[lo+a : lo+min(length, a+bNew)]
				if !slices.Equal(got, want) {
					t.Fatalf("iter %d (cfg %+v, R=%d, from D=%d at step %d): step %d slice %d rows %v, want %v", iter, cfg, p.Rows(), from, k, s, d, got, want)
				}
				for _, g := range got {
					lo, hi := p.RowTokens(g, g+1)
					toks, segs, pos := make([]int32, l), make([]int32, l), make([]int32, l)
					PackRuns(p.Runs(epoch, lo, hi), l, func(r DocRun) []int32 {
						out := make([]int32, r.Tokens)
						for j := range out {
							out[j] = docToken(r.RowGroup, r.Row, int64(j))
						}
						return out
					}, testEOD, 0, toks, segs, pos)
					wt, ws, wp := m.slice(g, 1, int64(l))
					if !slices.Equal(toks, wt) || !slices.Equal(segs, ws) || !slices.Equal(pos, wp) {
						t.Fatalf("iter %d: packed row %d differs from the model", iter, g)
					}
				}
				checked++
			}
		}
	}
	if checked == 0 {
		t.Fatal("no remainder step checked")
	}
}
