package batching

import (
	"encoding/binary"
	"errors"
	"slices"
	"sort"
	"testing"
)

// FuzzPlan plans random datasets and configurations (row group sizes, B, D,
// W, policy, seed, shuffle, a resume position and a set of slices) and checks
// the plan's invariants: NewPlan never panics and fails only with one of the
// package's sentinels; the steps per epoch follow the policy; the D streams
// split the epoch's rows contiguously with lengths differing by at most one
// and cover every row exactly once; ReadStart points at the window holding
// the position's first row; ReadSetFrom is exactly the row groups of the
// segments read from ReadStart up to ReadEnd; SliceReal adds up to the rows
// delivered. Seeds: the f.Add calls below and testdata/fuzz/FuzzPlan.
// Run with `make fuzz` or
// `go test ./batching -run '^$' -fuzz '^FuzzPlan$' -fuzztime 60s`.
func FuzzPlan(f *testing.F) {
	le := func(rows ...uint16) []byte {
		b := make([]byte, 2*len(rows))
		for i, r := range rows {
			binary.LittleEndian.PutUint16(b[2*i:], r)
		}
		return b
	}
	// rowGroups, B, D, W, policy, seed, shuffle, epoch, step, slice mask
	f.Add(le(7, 7, 7, 5, 7, 7, 3), 8, uint8(4), int32(0), uint8(Pad), uint64(1), false, uint8(0), uint16(3), uint16(0b1010))
	f.Add(le(100, 100, 0, 100), 64, uint8(8), int32(50), uint8(Drop), uint64(7), true, uint8(2), uint16(1), uint16(0xff))
	f.Add(le(10, 10), 20, uint8(2), int32(3), uint8(Raise), uint64(0), true, uint8(1), uint16(0), uint16(1))
	f.Add(le(10, 11), 20, uint8(2), int32(0), uint8(Raise), uint64(0), false, uint8(0), uint16(0), uint16(3))
	f.Add(le(1), 4, uint8(3), int32(0), uint8(Pad), uint64(9), false, uint8(0), uint16(0), uint16(7))
	f.Add(le(0, 0), 2, uint8(1), int32(0), uint8(Drop), uint64(0), false, uint8(0), uint16(0), uint16(1))
	f.Add(le(5, 5), 3, uint8(2), int32(-1), uint8(7), uint64(0), false, uint8(0), uint16(0), uint16(1))
	f.Add(le(65535, 65535, 1), 1024, uint8(16), int32(65536), uint8(Pad), uint64(1<<63), true, uint8(5), uint16(200), uint16(0xffff))
	f.Fuzz(func(t *testing.T, rgBytes []byte, bigB int, d uint8, w int32, policy uint8, seed uint64, shuffle bool, epoch uint8, step uint16, mask uint16) {
		if len(rgBytes) > 2*64 {
			rgBytes = rgBytes[:2*64]
		}
		rgs := make([]RowGroup, len(rgBytes)/2)
		var n int64
		for i := range rgs {
			rows := int64(binary.LittleEndian.Uint16(rgBytes[2*i:]))
			rgs[i] = RowGroup{File: i / 3, Index: i % 3, Rows: rows, Bytes: 10 * rows}
			n += rows
		}
		cfg := Config{GlobalBatch: bigB, D: int(d), Seed: seed, ShuffleRowGroups: shuffle, Window: int64(w), Policy: Policy(policy)}
		p, err := NewPlan(rgs, cfg)
		validCfg := bigB > 0 && d > 0 && bigB%int(d) == 0 && w >= 0 && policy <= uint8(Raise)
		if err != nil {
			switch {
			case !validCfg && !errors.Is(err, ErrInvalidConfig):
				t.Fatalf("NewPlan(%+v) = %v, want ErrInvalidConfig", cfg, err)
			case validCfg && n == 0 && !errors.Is(err, ErrEmptyDataset):
				t.Fatalf("NewPlan(%+v) of an empty dataset = %v, want ErrEmptyDataset", cfg, err)
			case validCfg && n > 0 && Policy(policy) == Raise && n%int64(bigB) != 0 && !errors.Is(err, ErrIndivisible):
				t.Fatalf("NewPlan(%+v) with N=%d = %v, want ErrIndivisible", cfg, n, err)
			case validCfg && n > 0 && !errors.Is(err, ErrIndivisible) && !errors.Is(err, ErrNoSteps):
				t.Fatalf("NewPlan(%+v) with N=%d = %v, want a plan", cfg, n, err)
			case validCfg && errors.Is(err, ErrNoSteps) && n >= int64(bigB):
				t.Fatalf("NewPlan(%+v) with N=%d = %v, but N >= B", cfg, n, err)
			}
			return
		}
		if !validCfg {
			t.Fatalf("NewPlan(%+v) accepted an invalid configuration", cfg)
		}
		B, D := int64(bigB), int(d)
		b := B / int64(D)
		if p.N() != n || int64(p.SliceRows()) != b {
			t.Fatalf("N()=%d SliceRows()=%d, want %d, %d", p.N(), p.SliceRows(), n, b)
		}
		steps := map[Policy]int64{Drop: n / B, Pad: (n + B - 1) / B, Raise: n / B}[cfg.Policy]
		if int64(p.StepsPerEpoch()) != steps || steps == 0 {
			t.Fatalf("StepsPerEpoch() = %d, want %d (N=%d, B=%d, %v)", p.StepsPerEpoch(), steps, n, B, cfg.Policy)
		}
		if cfg.Policy == Raise && n%B != 0 {
			t.Fatalf("Raise planned N=%d, B=%d", n, B)
		}

		e := int(epoch % 8)
		if order := p.RowGroupOrder(e); !isPerm(order, len(rgs)) {
			t.Fatalf("RowGroupOrder(%d) = %v is not a permutation of %d row groups", e, order, len(rgs))
		}
		// Streams: contiguous lengths, every row exactly once.
		covered := make([][][2]int64, len(rgs))
		var total int64
		for dd := range D {
			want := n / int64(D)
			if int64(dd) < n%int64(D) {
				want++
			}
			if p.StreamLen(dd) != want {
				t.Fatalf("StreamLen(%d) = %d, want %d", dd, p.StreamLen(dd), want)
			}
			var l int64
			for _, s := range p.Stream(e, dd) {
				if s.RowGroup < 0 || s.RowGroup >= len(rgs) || s.Start < 0 || s.End > rgs[s.RowGroup].Rows || s.Len() <= 0 {
					t.Fatalf("Stream(%d, %d) has segment %+v outside the row groups", e, dd, s)
				}
				covered[s.RowGroup] = append(covered[s.RowGroup], [2]int64{s.Start, s.End})
				l += s.Len()
			}
			if l != want {
				t.Fatalf("Stream(%d, %d) has %d rows, want %d", e, dd, l, want)
			}
			total += l
			// Slices deliver the stream's rows (Pad) or b rows per step.
			var real int64
			for st := range int(min(steps, 2048)) {
				real += int64(p.SliceReal(st, dd))
			}
			if steps > 2048 { // the middle steps are full: b real rows each
				real += (steps-2049)*b + int64(p.SliceReal(int(steps-1), dd))
			}
			if wantReal := map[bool]int64{true: want, false: steps * b}[cfg.Policy == Pad]; real != wantReal {
				t.Fatalf("SliceReal of stream %d sums to %d, want %d", dd, real, wantReal)
			}
		}
		if total != n {
			t.Fatalf("streams hold %d rows, want N=%d", total, n)
		}
		for g, iv := range covered {
			sort.Slice(iv, func(i, j int) bool { return iv[i][0] < iv[j][0] })
			var at int64
			for _, r := range iv {
				if r[0] != at {
					t.Fatalf("row group %d: rows covered %v, not exactly once", g, iv)
				}
				at = r[1]
			}
			if at != rgs[g].Rows {
				t.Fatalf("row group %d: rows covered %v, want [0, %d)", g, iv, rgs[g].Rows)
			}
		}

		// A resume position (the end of an epoch included) and its reads.
		pos := Position{Epoch: e, Step: int(step) % (int(steps) + 1)}
		var sl []int
		for dd := range D {
			if mask&(1<<(dd%16)) != 0 {
				sl = append(sl, dd)
			}
		}
		want := map[int]bool{}
		for _, dd := range sl {
			segs := p.Stream(e, dd)
			si, inSeg, from := p.ReadStart(pos, dd)
			end := p.ReadEnd(dd)
			if end > p.StreamLen(dd) || end < 0 {
				t.Fatalf("ReadEnd(%d) = %d outside [0, %d]", dd, end, p.StreamLen(dd))
			}
			row := int64(pos.Step) * b
			if si < 0 || si > len(segs) || from > max(row, end) || (from < end && cfg.Window > 0 && from%cfg.Window != 0) ||
				(from < end && cfg.Window == 0 && from != row) || (from < end && cfg.Window > 0 && from+cfg.Window <= row) {
				t.Fatalf("ReadStart(%+v, %d) = (%d, %d, %d) for row %d, W=%d, %d segments, ReadEnd %d",
					pos, dd, si, inSeg, from, row, cfg.Window, len(segs), end)
			}
			var at int64
			for i, s := range segs {
				if i == si && (at+inSeg != from || inSeg < 0 || inSeg >= s.Len()) {
					t.Fatalf("ReadStart(%+v, %d) = (%d, %d, %d), but segment %d %+v starts at stream row %d",
						pos, dd, si, inSeg, from, i, s, at)
				}
				if i >= si && at < end {
					want[s.RowGroup] = true
				}
				at += s.Len()
			}
		}
		got := p.ReadSetFrom(pos, sl)
		var wantSet []int
		for g := range want {
			wantSet = append(wantSet, g)
		}
		sort.Ints(wantSet)
		if !slices.Equal(got, wantSet) {
			t.Fatalf("ReadSetFrom(%+v, %v) = %v, want the row groups from ReadStart to ReadEnd %v", pos, sl, got, wantSet)
		}
		whole := p.ReadSet(e, sl)
		for _, g := range got {
			if _, ok := slices.BinarySearch(whole, g); !ok {
				t.Fatalf("ReadSetFrom(%+v) reads row group %d, which ReadSet(%d) does not", pos, g, e)
			}
		}
		// Shuffle windows are permutations.
		if cfg.Window > 0 {
			for _, dd := range sl {
				for k := int64(0); k < 3 && k*cfg.Window < p.StreamLen(dd); k++ {
					perm := p.WindowPerm(e, dd, int(k))
					size := min(cfg.Window, p.StreamLen(dd)-k*cfg.Window)
					if !isPerm(perm, int(size)) {
						t.Fatalf("WindowPerm(%d, %d, %d) = %v is not a permutation of %d", e, dd, k, perm, size)
					}
				}
			}
		}
	})
}

// isPerm reports whether p is a permutation of 0..n-1.
func isPerm(p []int32, n int) bool {
	if len(p) != n {
		return false
	}
	seen := make([]bool, n)
	for _, v := range p {
		if v < 0 || int(v) >= n || seen[v] {
			return false
		}
		seen[v] = true
	}
	return true
}
