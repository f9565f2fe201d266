package batching

import (
	"errors"
	"flag"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/internal/testseed"
)

var seedFlag = flag.Uint64("batching.seed", 0, "seed of the randomized tests of package batching (0: from MESHFEED_SEED or the clock)")

// testSeed returns the seed of a randomized test and logs how to rerun it.
func testSeed(t *testing.T) uint64 { return testseed.Get(t, *seedFlag, "batching.seed") }

// randomRows returns row group sizes over 1-4 files, including empty and
// one-row row groups.
func randomRows(r *rand.Rand) []int64 {
	var rows []int64
	for f := r.IntN(4) + 1; f > 0; f-- {
		for g := r.IntN(6); g > 0; g-- {
			switch r.IntN(6) {
			case 0:
				rows = append(rows, 0)
			case 1:
				rows = append(rows, 1)
			default:
				rows = append(rows, int64(r.IntN(40)+2))
			}
		}
	}
	return rows
}

// randomConfig draws B, D, seed, shuffle, window and policy.
func randomConfig(r *rand.Rand, n int64) Config {
	d := []int{1, 2, 3, 4, 5, 8}[r.IntN(6)]
	b := r.IntN(12) + 1
	var w int64
	switch r.IntN(5) {
	case 0, 1:
	case 2:
		w = 1
	case 3:
		w = int64(r.IntN(3*b) + 1)
	default:
		w = int64(r.IntN(int(n)+5) + 1)
	}
	return Config{GlobalBatch: b * d, D: d, Seed: r.Uint64(), ShuffleRowGroups: r.IntN(2) == 0,
		Window: w, Policy: Policy(r.IntN(3))}
}

// assignSlices splits the D slices over P processes: contiguous blocks or a
// random assignment, each process getting at least one slice.
func assignSlices(r *rand.Rand, d, p int) [][]int {
	procs := make([][]int, p)
	if r.IntN(2) == 0 {
		for s := 0; s < d; s++ {
			procs[s*p/d] = append(procs[s*p/d], s)
		}
		return procs
	}
	perm := r.Perm(d)
	for i, s := range perm {
		procs[i%p] = append(procs[i%p], s)
	}
	for _, pr := range procs {
		slices.Sort(pr)
	}
	return procs
}

// TestPlanProperties checks DESIGN.md's invariants on random datasets and
// configurations.
func TestPlanProperties(t *testing.T) {
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	iters := 120
	if testing.Short() {
		iters = 30
	}
	for it := 0; it < iters; it++ {
		rows := randomRows(r)
		var n int64
		for _, x := range rows {
			n += x
		}
		cfg := randomConfig(r, max(n, 1))
		ds := newDataset(rows, 10)
		p, err := NewPlan(ds.rgs, cfg)
		bigB := int64(cfg.GlobalBatch)
		switch {
		case n == 0:
			if !errors.Is(err, ErrEmptyDataset) {
				t.Fatalf("iter %d: N = 0: NewPlan = %v, want ErrEmptyDataset", it, err)
			}
			continue
		case cfg.Policy == Raise && n%bigB != 0:
			if !errors.Is(err, ErrIndivisible) {
				t.Fatalf("iter %d: raise, N=%d B=%d: NewPlan = %v, want ErrIndivisible", it, n, bigB, err)
			}
			continue
		case cfg.Policy == Drop && n < bigB:
			if !errors.Is(err, ErrNoSteps) {
				t.Fatalf("iter %d: drop, N=%d B=%d: NewPlan = %v, want ErrNoSteps", it, n, bigB, err)
			}
			continue
		case err != nil:
			t.Fatalf("iter %d: NewPlan(%v, %+v) = %v", it, rows, cfg, err)
		}
		checkPlan(t, r, p, ds, rows, cfg, it)
	}
}

func checkPlan(t *testing.T, r *rand.Rand, p *Plan, ds dataset, rows []int64, cfg Config, it int) {
	t.Helper()
	n, bigB := p.N(), int64(cfg.GlobalBatch)
	ctx := func() string { return "iter " + strconv.Itoa(it) + " rows " + fmtInts(rows) + " cfg " + fmtCfg(cfg) }
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)

	// (1) Steps per epoch come from metadata and the policy only.
	var wantSteps int64
	switch cfg.Policy {
	case Drop, Raise:
		wantSteps = n / bigB
	case Pad:
		wantSteps = (n + bigB - 1) / bigB
	}
	if int64(p.StepsPerEpoch()) != wantSteps {
		t.Fatalf("%s: StepsPerEpoch = %d, want %d", ctx(), p.StepsPerEpoch(), wantSteps)
	}
	epoch := r.IntN(3)
	exp := expectedSlices(p, ds, epoch)

	// Stream segments: contiguous, lengths differ by at most one.
	var total int64
	for d := 0; d < cfg.D; d++ {
		var l int64
		for _, s := range p.Stream(epoch, d) {
			if s.Len() <= 0 {
				t.Fatalf("%s: stream %d has an empty segment %v", ctx(), d, s)
			}
			l += s.Len()
		}
		if l != p.StreamLen(d) || l < n/int64(cfg.D) || l > n/int64(cfg.D)+1 {
			t.Fatalf("%s: stream %d has %d rows, StreamLen %d, N/D = %d", ctx(), d, l, p.StreamLen(d), n/int64(cfg.D))
		}
		total += l
	}
	if total != n {
		t.Fatalf("%s: streams hold %d rows, want N = %d", ctx(), total, n)
	}

	// Every slice, cut by its own cutter; processes serve random subsets.
	maxRG, maxRGBytes := int64(0), int64(0)
	for _, rg := range ds.rgs {
		maxRG = max(maxRG, rg.Rows)
		maxRGBytes = max(maxRGBytes, rg.Bytes)
	}
	nproc := r.IntN(cfg.D) + 1
	procs := assignSlices(r, cfg.D, nproc)
	got := make([][][]int64, p.StepsPerEpoch())
	for s := range got {
		got[s] = make([][]int64, cfg.D)
	}
	var totalBytes int64
	for _, rg := range ds.rgs {
		totalBytes += rg.Bytes
	}
	segOnly := func(int) bool { return r.IntN(3) == 0 }
	for pi, sl := range procs {
		readSet := p.ReadSet(epoch, sl)
		var pushed []int
		for _, d := range sl {
			base := mem.CurrentAlloc()
			run := runStream(t, p, ds, epoch, d, 0, mem, runOptions{segmentOnly: segOnly})
			for s, ids := range run.ids {
				got[s][d] = ids
			}
			for _, seg := range run.pushed {
				pushed = append(pushed, seg.RowGroup)
			}
			// (6) Memory: the raw rows of one window (or slice) plus two row
			// groups, a carried partial slice and the slice being returned.
			rowsBound := max(cfg.Window, int64(p.SliceRows())) + 2*maxRG + 2*int64(p.SliceRows())
			if held := int64(run.maxAlloc - base); held > rowsBound*maxBytesPerRow(mem, ds)+4096 {
				t.Fatalf("%s: stream %d held %d bytes, bound %d rows", ctx(), d, held, rowsBound)
			}
		}
		// (3) A process reads exactly the row groups of its streams' ReadSet,
		// and about total/P bytes plus two row groups per stream.
		slices.Sort(pushed)
		pushed = slices.Compact(pushed)
		if !slices.Equal(pushed, readSet) {
			t.Fatalf("%s: process %d (slices %v) read row groups %v, ReadSet = %v", ctx(), pi, sl, pushed, readSet)
		}
		share := totalBytes * int64(len(sl)) / int64(cfg.D)
		bound := share + int64(len(sl))*(10+2*maxRGBytes) // 10 bytes per row: one row of rounding per stream
		if b := p.Bytes(epoch, sl); b > bound {
			t.Fatalf("%s: process %d of %d (slices %v) reads %d bytes, bound %d (share %d)", ctx(), pi, nproc, sl, b, bound, share)
		}
	}

	// (2) The global batches match the independent model, whoever served them.
	for s := range exp {
		for d := range exp[s] {
			if !slices.Equal(got[s][d], exp[s][d]) {
				t.Fatalf("%s: epoch %d step %d slice %d = %v, want %v", ctx(), epoch, s, d, got[s][d], exp[s][d])
			}
		}
	}

	// (4) Every row at most once; drop misses exactly N mod B, the others none;
	// padding (checked zero and masked in checkSlice) is ceil(N/B)*B - N rows.
	seen := make(map[int64]bool)
	var padding int64
	for s := range got {
		for d := range got[s] {
			for _, id := range got[s][d] {
				if id < 0 || id >= n || seen[id] {
					t.Fatalf("%s: row %d delivered twice or out of range", ctx(), id)
				}
				seen[id] = true
			}
			padding += int64(p.SliceRows()) - int64(p.SliceReal(s, d))
		}
	}
	if missing := n - int64(len(seen)); missing != p.DroppedRows() || (cfg.Policy == Drop && missing != n%bigB) || (cfg.Policy != Drop && missing != 0) {
		t.Fatalf("%s: %d rows not delivered, DroppedRows %d", ctx(), missing, p.DroppedRows())
	}
	if padding != p.PaddedRows() || (cfg.Policy == Pad && padding != int64(p.StepsPerEpoch())*bigB-n) {
		t.Fatalf("%s: %d padding rows, PaddedRows %d", ctx(), padding, p.PaddedRows())
	}

	// (5) Resume at a random step: the tail of the uninterrupted run, reading
	// from the window that holds the step.
	k := r.IntN(p.StepsPerEpoch() + 1)
	for d := 0; d < cfg.D; d++ {
		run := runStream(t, p, ds, epoch, d, k, mem, runOptions{})
		for i, ids := range run.ids {
			if !slices.Equal(ids, got[k+i][d]) {
				t.Fatalf("%s: resume at step %d: stream %d step %d = %v, want %v", ctx(), k, d, k+i, ids, got[k+i][d])
			}
		}
		segIdx, _, ws := p.ReadStart(Position{Epoch: epoch, Step: k}, d)
		row := int64(k) * int64(p.SliceRows())
		wantWS := row
		if cfg.Window > 0 {
			wantWS = row / cfg.Window * cfg.Window
		}
		real := k < p.StepsPerEpoch() && p.SliceReal(k, d) > 0
		if !real {
			if len(run.pushed) != 0 {
				t.Fatalf("%s: resume at step %d: stream %d has nothing left but read %v", ctx(), k, d, run.pushed)
			}
			continue
		}
		if ws != wantWS {
			t.Fatalf("%s: resume at step %d: stream %d window start %d, want %d", ctx(), k, d, ws, wantWS)
		}
		segs := p.Stream(epoch, d)
		var at int64
		for _, s := range segs[:segIdx] {
			at += s.Len()
		}
		if len(run.pushed) == 0 || run.pushed[0] != segs[segIdx] || at > ws || at+segs[segIdx].Len() <= ws {
			t.Fatalf("%s: resume at step %d: stream %d first read %v, want segment %d %v holding stream row %d",
				ctx(), k, d, run.pushed, segIdx, segs[segIdx], ws)
		}
		if !slices.Equal(run.pushed, segs[segIdx:segIdx+len(run.pushed)]) {
			t.Fatalf("%s: resume: stream %d read %v, not the segments from %d on", ctx(), d, run.pushed, segIdx)
		}
	}
}

// maxBytesPerRow returns the most bytes per row that any row group of ds
// allocates when built by makeRecord.
func maxBytesPerRow(mem *memory.CheckedAllocator, ds dataset) int64 {
	var most int64
	for i, rg := range ds.rgs {
		if rg.Rows == 0 {
			continue
		}
		before := mem.CurrentAlloc()
		rec := makeRecord(mem, testSchema, ds.first[i], rg.Rows)
		most = max(most, int64(mem.CurrentAlloc()-before)/rg.Rows+1)
		rec.Release()
	}
	return most
}

func fmtInts(x []int64) string {
	b := []byte{'['}
	for i, v := range x {
		if i > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendInt(b, v, 10)
	}
	return string(append(b, ']'))
}

func fmtCfg(c Config) string {
	return "{B=" + strconv.Itoa(c.GlobalBatch) + " D=" + strconv.Itoa(c.D) + " W=" + strconv.FormatInt(c.Window, 10) +
		" shuffle=" + strconv.FormatBool(c.ShuffleRowGroups) + " policy=" + c.Policy.String() + "}"
}

// TestMemoryBounded runs a dataset much larger than the bound: the cutter's
// peak holding must stay near W rows + 2 row groups + slices, far below the
// dataset, shuffled or not.
func TestMemoryBounded(t *testing.T) {
	rows := make([]int64, 100)
	for i := range rows {
		rows[i] = 100
	}
	ds := newDataset(rows, 10)
	for _, w := range []int64{0, 500, 37} {
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		p, err := NewPlan(ds.rgs, Config{GlobalBatch: 64, D: 2, Window: w, Seed: 3, ShuffleRowGroups: true, Policy: Pad})
		if err != nil {
			t.Fatal(err)
		}
		perRow := maxBytesPerRow(mem, ds)
		run := runStream(t, p, ds, 1, 1, 0, mem, runOptions{})
		bound := (max(w, 32) + 2*100 + 2*32) * perRow
		if int64(run.maxAlloc) > bound+4096 {
			t.Errorf("W=%d: peak %d bytes, want <= %d (dataset: %d bytes)", w, run.maxAlloc, bound, 10000*perRow)
		}
		mem.AssertSize(t, 0)
	}
}
