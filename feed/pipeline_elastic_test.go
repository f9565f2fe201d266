package feed

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/meshfeed/meshfeed/transport"
)

// realIDs returns the ids of the real rows of a step, slice by slice.
func realIDs(st pstep, b int) []int64 {
	var out []int64
	for i, real := range st.meta.RealRows {
		out = append(out, st.ids[i*b:i*b+real]...)
	}
	return out
}

// TestPipelineElasticResume: a run reads steps [0, k) of epoch 0 with D
// slices, then resumes with D' slices (served to two clients, each with half
// of them) and an elastic switch at (0, k): across the switch, epoch 0
// delivers every row the plan with D delivers, exactly once, in the same
// number of steps; epoch 1 equals the plain plan with D'. Resuming inside the
// remainder gives its suffix.
func TestPipelineElasticResume(t *testing.T) {
	spec := pipeSpec()
	dir := writeDataset(t, spec)
	ts := startPipeline(t, checkedMem(t), []string{dir})
	ctx := context.Background()
	const B = 12
	for _, sh := range []transport.Shuffle{{}, {Enabled: true, Window: 9}} {
		for _, policy := range []transport.LastBatch{transport.LastBatchDrop, transport.LastBatchPad} {
			for _, dd := range [][2]int{{4, 2}, {2, 6}, {6, 4}, {12, 1}} {
				oldD, newD := dd[0], dd[1]
				name := fmt.Sprintf("%s W=%d D=%d->%d", policy, sh.Window, oldD, newD)
				all := func(d int) []int {
					s := make([]int, d)
					for i := range s {
						s[i] = i
					}
					return s
				}
				oldReq := pipeRequest(dir, B, oldD, all(oldD), policy)
				oldReq.Shuffle, oldReq.Epochs = sh, 1
				full, err := readSteps(t, ctx, ts.Client, oldReq, false)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				spe := len(full)
				epoch := map[int64]bool{}
				for _, st := range full {
					for _, id := range realIDs(st, B/oldD) {
						epoch[id] = true
					}
				}
				plainReq := pipeRequest(dir, B, newD, all(newD), policy)
				plainReq.Shuffle = sh
				plainReq.Start = transport.Position{Epoch: 1}
				plain, err := readSteps(t, ctx, ts.Client, plainReq, false)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				for _, k := range []int{0, 1, spe / 2, spe - 1} {
					seen := map[int64]int{}
					for _, st := range full[:k] {
						for _, id := range realIDs(st, B/oldD) {
							seen[id]++
						}
					}
					// Two clients, each serving half of the new slices.
					halves := [][]int{all(newD)[:max(1, newD/2)], all(newD)[max(1, newD/2):]}
					var got [2][]pstep
					for h, sl := range halves {
						if len(sl) == 0 {
							continue
						}
						req := pipeRequest(dir, B, newD, sl, policy)
						req.Shuffle = sh
						req.Start = transport.Position{Step: k}
						req.Elastic = &transport.Elastic{FromSlices: oldD, Epoch: 0, Step: k}
						if got[h], err = readSteps(t, ctx, ts.Client, req, false); err != nil {
							t.Fatalf("%s k=%d: %v", name, k, err)
						}
					}
					rem := spe - k
					for h := range got {
						if len(halves[h]) == 0 {
							continue
						}
						if len(got[h]) != rem+len(plain) {
							t.Fatalf("%s k=%d client %d: %d steps, want %d + %d", name, k, h, len(got[h]), rem, len(plain))
						}
						for i, st := range got[h][:rem] {
							if st.meta.Epoch != 0 || st.meta.Step != k+i {
								t.Fatalf("%s k=%d: step %d has meta %+v", name, k, i, st.meta)
							}
							for _, id := range realIDs(st, B/newD) {
								seen[id]++
							}
						}
					}
					for id, c := range seen {
						if c != 1 || !epoch[id] {
							t.Fatalf("%s k=%d: id %d delivered %d times (in the epoch under D: %v)", name, k, id, c, epoch[id])
						}
					}
					if len(seen) != len(epoch) {
						t.Fatalf("%s k=%d: %d ids across the switch, the epoch delivers %d", name, k, len(seen), len(epoch))
					}
					// From epoch 1 on: the plain plan with D'.
					for i, want := range plain {
						var ids []int64
						var real []int
						for h := range got {
							if len(halves[h]) > 0 {
								ids = append(ids, got[h][rem+i].ids...)
								real = append(real, got[h][rem+i].meta.RealRows...)
							}
						}
						if !slices.Equal(ids, want.ids) || !slices.Equal(real, want.meta.RealRows) {
							t.Fatalf("%s k=%d: epoch 1 step %d = %v, want the plain plan's %v", name, k, i, ids, want.ids)
						}
					}
					// Resuming inside the remainder gives its suffix.
					if k+1 < spe && len(halves[0]) > 0 {
						req := pipeRequest(dir, B, newD, halves[0], policy)
						req.Shuffle, req.Epochs = sh, 1
						req.Start = transport.Position{Step: k + 1}
						req.Elastic = &transport.Elastic{FromSlices: oldD, Epoch: 0, Step: k}
						tail, err := readSteps(t, ctx, ts.Client, req, false)
						if err != nil {
							t.Fatalf("%s k=%d: %v", name, k, err)
						}
						want := got[0][1:rem]
						if len(tail) != len(want) {
							t.Fatalf("%s k=%d: resumed inside the remainder: %d steps, want %d", name, k, len(tail), len(want))
						}
						for i := range tail {
							if !slices.Equal(tail[i].ids, want[i].ids) || !slices.Equal(tail[i].mask, want[i].mask) {
								t.Fatalf("%s k=%d: resumed inside the remainder, step %d = %v, want %v", name, k, i, tail[i].ids, want[i].ids)
							}
						}
					}
				}
			}
		}
	}
}

func TestRequestElastic(t *testing.T) {
	base := `{"version":1,"datasets":["/data/x"],"global_batch_size":12,"num_slices":2,"slices":[0,1],"last_batch":"pad"`
	for _, tc := range []struct {
		tail string
		ok   bool
		msg  string
	}{
		{`}`, true, ""},
		{`,"start":{"epoch":0,"step":3},"elastic":{"from_slices":4,"epoch":0,"step":3}}`, true, ""},
		{`,"start":{"epoch":1,"step":0},"elastic":{"from_slices":4,"epoch":0,"step":3}}`, true, ""},
		{`,"start":{"epoch":0,"step":2},"elastic":{"from_slices":4,"epoch":0,"step":3}}`, false, "before the elastic switch"},
		{`,"elastic":{"from_slices":5,"epoch":0,"step":0}}`, false, "does not divide global_batch_size 12"},
		{`,"elastic":{"from_slices":0,"epoch":0,"step":0}}`, false, "from_slices 0 must be > 0"},
		{`,"elastic":{"from_slices":4,"epoch":0,"step":0,"extra":1}}`, false, "unknown field"},
	} {
		req, err := transport.DecodeRequest([]byte(base + tc.tail))
		if tc.ok != (err == nil) || (err != nil && len(containsAll(err.Error(), tc.msg)) > 0) {
			t.Errorf("%s: transport.DecodeRequest = %v, want ok=%v (%q)", tc.tail, err, tc.ok, tc.msg)
			continue
		}
		if err == nil {
			b, _ := req.Encode()
			again, err := transport.DecodeRequest(b)
			if err != nil || (req.Elastic == nil) != (again.Elastic == nil) || (req.Elastic != nil && *req.Elastic != *again.Elastic) {
				t.Errorf("%s: round trip = %+v, %v", tc.tail, again, err)
			}
		}
	}
}
