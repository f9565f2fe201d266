package feed

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"google.golang.org/grpc/codes"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/internal/testseed"
	"github.com/meshfeed/meshfeed/shape"
	"github.com/meshfeed/meshfeed/transport"
)

// packModel packs seqs first-fit, in order, into rows of L tokens, as
// shape.Pack's contract says: tokens (fill 0), 1-based segment ids (0:
// padding) and positions restarting at 0 per sequence. ok is false when a
// sequence finds no row.
func packModel(seqs [][]int32, L, rows int) (tok, seg, pos []int32, ok bool) {
	tok, seg, pos = make([]int32, rows*L), make([]int32, rows*L), make([]int32, rows*L)
	used, segs := make([]int, rows), make([]int32, rows)
	for _, s := range seqs {
		if len(s) == 0 {
			continue
		}
		r := slices.IndexFunc(used, func(u int) bool { return L-u >= len(s) })
		if r < 0 {
			return nil, nil, nil, false
		}
		segs[r]++
		for j, v := range s {
			k := r*L + used[r] + j
			tok[k], seg[k], pos[k] = v, segs[r], int32(j)
		}
		used[r] += len(s)
	}
	return tok, seg, pos, true
}

// packedColumns returns a kept step's tokens, segment ids and positions, flat.
func packedColumns(t *testing.T, st pstep, L int) (tok, seg, pos []int32) {
	t.Helper()
	var out [3][]int32
	for i := range out {
		c := st.rec.Column(i).(*array.FixedSizeList)
		out[i] = c.ListValues().(*array.Int32).Int32Values()[c.Offset()*L : (c.Offset()+c.Len())*L]
	}
	return out[0], out[1], out[2]
}

// oldStreams returns the rows old stream d delivers in an epoch of model
// (steps of B ids, slice by slice), per stream.
func oldStreams(steps [][]int64, D int) [][]int64 {
	out := make([][]int64, D)
	for _, st := range steps {
		b := len(st) / D
		for d := range D {
			out[d] = append(out[d], st[d*b:(d+1)*b]...)
		}
	}
	return out
}

// TestPipelineElasticPacked: a packed list<int32> column resumed across an
// elastic switch (D = 4 -> 8 and 8 -> 4, B = 24, pack_ratio 4: ceil(6/4)*4 =
// ceil(3/4)*8 = 8 packed rows a step on both sides, although 4 divides
// neither b). Every step after the switch has the packed global batch's shape
// of before; each new slice holds, packed first-fit, the source rows the
// contract gives it (the old streams' rest of the epoch re-split over D'),
// with segment ids and positions, so every source row of the epoch arrives
// once; epoch 1 is the plain plan with D' packed; resuming inside the
// remainder gives its suffix.
func TestPipelineElasticPacked(t *testing.T) {
	spec := pipeSpec()
	spec.Tokens, spec.TokensMin, spec.TokensMax = true, 1, 5
	dir := writeDataset(t, spec)
	ts := startPipeline(t, checkedMem(t), []string{dir})
	ctx := context.Background()
	const B, L, r = 24, 16, 4.0
	cols := []transport.Column{{Name: "tokens", Length: L, PackRatio: r}}
	all := func(d int) []int {
		s := make([]int, d)
		for i := range s {
			s[i] = i
		}
		return s
	}
	// check compares step st (slices 0..D-1 of b source rows each) with the
	// model's ids, packed.
	check := func(name string, st pstep, D int, ids []int64) {
		t.Helper()
		b, p := B/D, shape.PackedRows(B/D, r)
		if st.rows != D*p || len(ids) != B {
			t.Fatalf("%s: %d packed rows (model %d ids), want %d x %d", name, st.rows, len(ids), D, p)
		}
		tok, seg, pos := packedColumns(t, st, L)
		for d := range D {
			var seqs [][]int32
			for _, id := range ids[d*b : (d+1)*b] {
				seqs = append(seqs, datagen.Tokens(spec.Seed, id, spec.TokensMin, spec.TokensMax))
			}
			wt, ws, wp, ok := packModel(seqs, L, p)
			if !ok {
				t.Fatalf("%s slice %d: the model does not fit ids %v into %d rows", name, d, ids[d*b:(d+1)*b], p)
			}
			lo, hi := d*p*L, (d+1)*p*L
			if !slices.Equal(tok[lo:hi], wt) || !slices.Equal(seg[lo:hi], ws) || !slices.Equal(pos[lo:hi], wp) {
				t.Fatalf("%s slice %d (ids %v):\ntokens %v segs %v pos %v\nwant   %v segs %v pos %v",
					name, d, ids[d*b:(d+1)*b], tok[lo:hi], seg[lo:hi], pos[lo:hi], wt, ws, wp)
			}
		}
	}
	for _, sh := range []transport.Shuffle{{}, {Enabled: true, Window: 9}} {
		for _, dd := range [][2]int{{4, 8}, {8, 4}} {
			oldD, newD := dd[0], dd[1]
			oldReq := pipeRequest(dir, B, oldD, all(oldD), transport.LastBatchDrop)
			oldReq.Shuffle, oldReq.Columns = sh, cols
			oldEpoch := newRefModel(t, spec, oldReq).epoch(0)
			newReq := pipeRequest(dir, B, newD, all(newD), transport.LastBatchDrop)
			newReq.Shuffle, newReq.Columns = sh, cols
			newEpoch1 := newRefModel(t, spec, newReq).epoch(1)
			spe := len(oldEpoch)
			for _, k := range []int{1, spe - 1} {
				name := fmt.Sprintf("W=%d D=%d->%d k=%d", sh.Window, oldD, newD, k)
				// The model of the remainder: the old streams' rows from step k
				// on, stream after stream, cut into newD equal streams.
				var rem []int64
				for _, s := range oldStreams(oldEpoch, oldD) {
					rem = append(rem, s[k*(B/oldD):]...)
				}
				b2, per := B/newD, len(rem)/newD
				req := *newReq
				req.Start = transport.Position{Step: k}
				req.Elastic = &transport.Elastic{FromSlices: oldD, Epoch: 0, Step: k}
				got, err := readSteps(t, ctx, ts.Client, &req, true)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if len(got) != spe-k+len(newEpoch1) {
					t.Fatalf("%s: %d steps, want %d + %d", name, len(got), spe-k, len(newEpoch1))
				}
				for i, st := range got[:spe-k] {
					var ids []int64
					for d := range newD {
						ids = append(ids, rem[d*per+i*b2:d*per+(i+1)*b2]...)
					}
					if st.meta.Epoch != 0 || st.meta.Step != k+i {
						t.Fatalf("%s: step %d has meta %+v", name, i, st.meta)
					}
					check(fmt.Sprintf("%s step %d", name, k+i), st, newD, ids)
				}
				for i, st := range got[spe-k:] {
					check(fmt.Sprintf("%s epoch 1 step %d", name, i), st, newD, newEpoch1[i])
				}
				// The steps before the switch, packed under D, have the same shape.
				oldReq.Epochs = 1
				before, err := readSteps(t, ctx, ts.Client, oldReq, true)
				if err != nil || len(before) != spe {
					t.Fatalf("%s: the old run: %d steps, %v", name, len(before), err)
				}
				for s := range k {
					check(fmt.Sprintf("%s old step %d", name, s), before[s], oldD, oldEpoch[s])
				}
				if k+1 >= spe {
					continue
				}
				// Resuming inside the remainder gives its suffix.
				req.Start, req.Epochs = transport.Position{Step: k + 1}, 1
				tail, err := readSteps(t, ctx, ts.Client, &req, true)
				if err != nil || len(tail) != spe-k-1 {
					t.Fatalf("%s: resumed at step %d: %d steps, %v; want %d", name, k+1, len(tail), err, spe-k-1)
				}
				for i, st := range tail {
					gt, gs, gp := packedColumns(t, st, L)
					wt, ws, wp := packedColumns(t, got[1+i], L)
					if !slices.Equal(gt, wt) || !slices.Equal(gs, ws) || !slices.Equal(gp, wp) {
						t.Fatalf("%s: resumed at step %d, step %d differs from the remainder's", name, k+1, k+1+i)
					}
				}
			}
		}
	}
}

// TestPipelineElasticPackedShapeChange: a switch whose pack_ratio gives the
// packed global batch another leading dimension (B = 24, D = 4 -> 8, ratio
// 2.5: 4 x ceil(6/2.5) = 12 rows, 8 x ceil(3/2.5) = 16) is refused when
// planned, naming B, D, D', the ratio, both shapes and the ratios that work.
func TestPipelineElasticPackedShapeChange(t *testing.T) {
	spec := pipeSpec()
	spec.Tokens, spec.TokensMin, spec.TokensMax = true, 1, 5
	dir := writeDataset(t, spec)
	ts := startPipeline(t, checkedMem(t), []string{dir})
	req := pipeRequest(dir, 24, 8, []int{0, 1, 2, 3, 4, 5, 6, 7}, transport.LastBatchDrop)
	req.Columns = []transport.Column{{Name: "tokens", Length: 16, PackRatio: 2.5}}
	req.Start = transport.Position{Step: 1}
	req.Elastic = &transport.Elastic{FromSlices: 4, Epoch: 0, Step: 1}
	want := []string{"num_slices 4 to 8", "pack_ratio 2.5", "global_batch_size 24", "4 x ceil(6/2.5) = 12 rows", "8 x ceil(3/2.5) = 16 rows",
		"ratios dividing both 6 and 3 (the largest is 3)", "[3, 6) (8 packed rows)", "[1.5, 2) (16 packed rows)"}
	_, err := ts.Client.GetFlightInfo(context.Background(), cmdDescriptor(t, req))
	checkStatus(t, "GetFlightInfo(packed elastic, shape changes)", err, codes.InvalidArgument, want)
	_, err = readSteps(t, context.Background(), ts.Client, req, false)
	checkStatus(t, "DoGet(packed elastic, shape changes)", err, codes.InvalidArgument, want)
	// A ratio the message proposes plans.
	req.Columns[0].PackRatio = 3
	if _, err := ts.Client.GetFlightInfo(context.Background(), cmdDescriptor(t, req)); err != nil {
		t.Fatalf("GetFlightInfo(pack_ratio 3): %v", err)
	}
}

// TestSamePackedRatios: checkPackedSwitch allows exactly the ratios that keep
// d*ceil(b/r) == d2*ceil(b2/r), and every interval samePackedRatios proposes
// holds only such ratios (random B, d, d2 and ratios; seed printed).
func TestSamePackedRatios(t *testing.T) {
	rng := rand.New(rand.NewPCG(testseed.Get(t, 0, ""), 1))
	for range 300 {
		d, d2 := 1+rng.IntN(16), 1+rng.IntN(16)
		if d == d2 {
			continue
		}
		B := d / gcd(d, d2) * d2 * (1 + rng.IntN(12))
		r := 1 + rng.Float64()*float64(B)
		b, b2 := B/d, B/d2
		same := d*shape.PackedRows(b, r) == d2*shape.PackedRows(b2, r)
		err := checkPackedSwitch(B, d, d2, r)
		if (err == nil) != same {
			t.Fatalf("checkPackedSwitch(B=%d, %d, %d, %v) = %v, want ok=%v", B, d, d2, r, err, same)
		}
		ivs := packedIntervals(B, d, d2, r)
		if len(ivs) == 0 {
			t.Fatalf("B=%d d=%d->%d r=%v: no interval proposed (ratio 1 always works)", B, d, d2, r)
		}
		for _, iv := range ivs {
			xs := []float64{iv.lo, iv.lo * 1.001, iv.lo + 0.5*(min(iv.hi, 2*iv.lo)-iv.lo)}
			if !math.IsInf(iv.hi, 1) {
				xs = append(xs, iv.hi*(1-1e-9))
				if x := iv.hi * (1 + 1e-9); d*shape.PackedRows(b, x) == iv.rows && d2*shape.PackedRows(b2, x) == iv.rows {
					t.Fatalf("B=%d d=%d->%d: ratio %v past the interval %+v still gives %d rows", B, d, d2, x, iv, iv.rows)
				}
			}
			for _, x := range xs {
				if x < iv.hi {
					if p, p2 := shape.PackedRows(b, x), shape.PackedRows(b2, x); d*p != iv.rows || d2*p2 != iv.rows {
						t.Fatalf("B=%d d=%d->%d: ratio %v in the interval %+v gives %d and %d rows", B, d, d2, x, iv, d*p, d2*p2)
					}
				}
			}
		}
		if c := gcd(b, b2); checkPackedSwitch(B, d, d2, float64(c)) != nil {
			t.Fatalf("B=%d d=%d->%d: ratio %d divides %d and %d but is refused", B, d, d2, c, b, b2)
		}
	}
}

// TestPipelineElasticPackOverflow: packing overflow is decided per slice, so a
// switch can newly cause it: the epoch packs under D (slices of b rows into
// ceil(b/2) rows of L tokens) but a slice of the remainder under D' = 2D does
// not fit into its ceil(b/4) rows. The stream delivers the steps before it,
// then fails FailedPrecondition (ErrPackOverflow) naming the step, the slice,
// the remainder stream's rows and the ratio that would fit. The case (D, L,
// k, step) is found on datagen's rows with the first-fit model.
func TestPipelineElasticPackOverflow(t *testing.T) {
	spec := pipeSpec()
	spec.Tokens, spec.TokensMin, spec.TokensMax = true, 1, 8
	const B, r = 8, 2.0
	fits := func(ids []int64, L int) bool {
		var seqs [][]int32
		for _, id := range ids {
			seqs = append(seqs, datagen.Tokens(spec.Seed, id, spec.TokensMin, spec.TokensMax))
		}
		_, _, _, ok := packModel(seqs, L, shape.PackedRows(len(ids), r))
		return ok
	}
	type found struct{ oldD, L, k, fail, slice int }
	var c *found
	for seed := uint64(1); seed <= 64 && c == nil; seed++ {
		spec.Seed = seed
		for _, oldD := range []int{1, 2} {
			oldReq := pipeRequest("", B, oldD, []int{0, 1}[:oldD], transport.LastBatchDrop)
			epoch := newRefModel(t, spec, oldReq).epoch(0)
			b, b2, newD := B/oldD, B/(2*oldD), 2*oldD
			for L := 8; L <= 16 && c == nil; L++ {
				oldFits := true
				for _, st := range epoch {
					for d := range oldD {
						oldFits = oldFits && fits(st[d*b:(d+1)*b], L)
					}
				}
				for k := 1; oldFits && k < 4 && c == nil; k++ {
					var rem []int64
					for _, s := range oldStreams(epoch, oldD) {
						rem = append(rem, s[k*b:]...)
					}
					per := len(rem) / newD
					for i := 0; i < len(epoch)-k && c == nil; i++ {
						for d := range newD {
							if !fits(rem[d*per+i*b2:d*per+(i+1)*b2], L) {
								c = &found{oldD, L, k, i, d}
								break
							}
						}
					}
				}
			}
			if c != nil {
				break
			}
		}
	}
	if c == nil {
		t.Fatal("no case packs the epoch under D but not its remainder under 2D: the dataset changed; widen the search")
	}
	t.Logf("case %+v, datagen seed %d", *c, spec.Seed)
	dir := writeDataset(t, spec)
	ts := startPipeline(t, checkedMem(t), []string{dir})
	cols := []transport.Column{{Name: "tokens", Length: c.L, PackRatio: r}}
	oldReq := pipeRequest(dir, B, c.oldD, []int{0, 1}[:c.oldD], transport.LastBatchDrop)
	oldReq.Columns, oldReq.Epochs = cols, 1
	if steps, err := readSteps(t, context.Background(), ts.Client, oldReq, false); err != nil || len(steps) != 103/B {
		t.Fatalf("%+v under D: %d steps, %v; want the whole epoch of %d", *c, len(steps), err, 103/B)
	}
	newD := 2 * c.oldD
	req := pipeRequest(dir, B, newD, []int{0, 1, 2, 3}[:newD], transport.LastBatchDrop)
	req.Columns, req.Epochs = cols, 1
	req.Start = transport.Position{Step: c.k}
	req.Elastic = &transport.Elastic{FromSlices: c.oldD, Epoch: 0, Step: c.k}
	steps, err := readSteps(t, context.Background(), ts.Client, req, false)
	if len(steps) != c.fail {
		t.Fatalf("%+v: %d steps before the error, want %d", *c, len(steps), c.fail)
	}
	b2 := B / newD
	checkStatus(t, "DoGet(remainder overflows)", err, codes.FailedPrecondition, []string{
		fmt.Sprintf("epoch 0 step %d slice %d", c.k+c.fail, c.slice),
		fmt.Sprintf("rows %d..%d of remainder stream %d of the elastic switch from num_slices %d at step %d", c.fail*b2, (c.fail+1)*b2-1, c.slice, c.oldD, c.k),
		`"tokens"`, "lower the packing ratio"})
}
