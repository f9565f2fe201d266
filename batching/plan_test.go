package batching

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// Golden values for the PRNG and permutations. They were computed by an
// independent Python port of the algorithms documented in rand.go (not by this
// code); the SplitMix64 and xoshiro256** vectors are also the published
// reference outputs of those generators. To re-derive them:
//
//	M = (1 << 64) - 1
//	def sm_next(st):
//	    st = (st + 0x9e3779b97f4a7c15) & M; z = st
//	    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M
//	    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M
//	    return st, z ^ (z >> 31)
//	def derive(seed, *ws):
//	    h = seed
//	    for w in ws: _, h = sm_next((h ^ w) & M)
//	    return h
//	def rotl(x, k): return ((x << k) | (x >> (64 - k))) & M
//	class Xo:
//	    def __init__(self, seed=None, state=None):
//	        if state is None:
//	            st, state = seed, []
//	            for _ in range(4): st, v = sm_next(st); state.append(v)
//	        self.s = list(state)
//	    def next(self):
//	        s = self.s; r = (rotl((s[1] * 5) & M, 7) * 9) & M; t = (s[1] << 17) & M
//	        s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 45)
//	        return r
//	    def bounded(self, n):
//	        m = self.next() * n
//	        if m & M < n:
//	            t = ((1 << 64) - n) % n
//	            while m & M < t: m = self.next() * n
//	        return m >> 64
//	def perm(seed, n):
//	    p = list(range(n))
//	    if n < 2: return p
//	    g = Xo(seed)
//	    for i in range(n - 1, 0, -1):
//	        j = g.bounded(i + 1); p[i], p[j] = p[j], p[i]
//	    return p

func TestSplitMix64Golden(t *testing.T) {
	s := splitMix64{}
	want := []uint64{0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f}
	for i, w := range want {
		if got := s.next(); got != w {
			t.Errorf("splitmix64(seed 0) output %d = %#x, want %#x", i, got, w)
		}
	}
}

func TestXoshiroGolden(t *testing.T) {
	g := xoshiro256ss{s: [4]uint64{1, 2, 3, 4}}
	want := []uint64{11520, 0, 1509978240, 1215971899390074240}
	for i, w := range want {
		if got := g.next(); got != w {
			t.Errorf("xoshiro256**({1,2,3,4}) output %d = %d, want %d", i, got, w)
		}
	}
}

func TestDeriveSeedGolden(t *testing.T) {
	tests := []struct {
		seed  uint64
		words []uint64
		want  uint64
	}{
		{42, []uint64{1, 0}, 0xd8005cdd08a0d146},
		{42, []uint64{2, 3, 1, 5}, 0x51384d1ad303f5d9},
		{42, nil, 42},
	}
	for _, tt := range tests {
		if got := deriveSeed(tt.seed, tt.words...); got != tt.want {
			t.Errorf("deriveSeed(%d, %v) = %#x, want %#x", tt.seed, tt.words, got, tt.want)
		}
	}
}

func TestBoundedGolden(t *testing.T) {
	tests := []struct {
		n    uint64
		want []uint64
	}{
		{7, []uint64{0, 2, 4, 6, 6, 5, 5, 5}},
		// n = 2^63+1 rejects about half the draws: 12 draws for these 5 values.
		{1<<63 + 1, []uint64{9147776489032658738, 7099593415032875292, 6633989454467100377, 7022439175346172479, 2681029139591840946}},
	}
	for _, tt := range tests {
		g := newXoshiro(42)
		var got []uint64
		for range tt.want {
			got = append(got, g.bounded(tt.n))
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("bounded(%d) from seed 42 = %v, want %v", tt.n, got, tt.want)
		}
	}
}

func TestPlanPermutationsGolden(t *testing.T) {
	rgs := make([]RowGroup, 10)
	for i := range rgs {
		rgs[i] = RowGroup{File: i / 3, Index: i % 3, Rows: 10, Bytes: 100}
	}
	p, err := NewPlan(rgs, Config{GlobalBatch: 10, D: 2, Seed: 7, ShuffleRowGroups: true, Window: 5, Policy: Raise})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		epoch int
		want  []int32
	}{
		{0, []int32{0, 7, 5, 1, 4, 6, 8, 3, 2, 9}},
		{1, []int32{0, 2, 5, 6, 9, 3, 4, 8, 7, 1}},
	} {
		if got := p.RowGroupOrder(tt.epoch); !slices.Equal(got, tt.want) {
			t.Errorf("RowGroupOrder(%d) = %v, want %v", tt.epoch, got, tt.want)
		}
	}
	// Stream 1 has 50 rows: window 2 is rows [10, 15).
	if got, want := p.WindowPerm(0, 1, 2), []int32{0, 4, 3, 2, 1}; !slices.Equal(got, want) {
		t.Errorf("WindowPerm(0, 1, 2) = %v, want %v", got, want)
	}
	if got := p.WindowPerm(0, 1, 10); got != nil {
		t.Errorf("WindowPerm(0, 1, 10) = %v, want nil (outside the stream)", got)
	}
}

func TestPolicy(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Policy
	}{{"drop", Drop}, {"pad", Pad}, {"raise", Raise}, {" PAD ", Pad}} {
		got, err := ParsePolicy(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParsePolicy(%q) = %v, %v, want %v", tt.in, got, err, tt.want)
		}
		if got.String() != strings.ToLower(strings.TrimSpace(tt.in)) {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), strings.TrimSpace(tt.in))
		}
	}
	for _, in := range []string{"", "dropp", "truncate"} {
		_, err := ParsePolicy(in)
		if !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), "drop, pad, raise") {
			t.Errorf("ParsePolicy(%q) error = %v, want ErrInvalidPolicy listing drop, pad, raise", in, err)
		}
	}
	if got := Policy(9).String(); got != "Policy(9)" {
		t.Errorf("Policy(9).String() = %q, want %q", got, "Policy(9)")
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		cfg  Config
		want []string // substrings of the error; nil for valid
	}{
		{Config{GlobalBatch: 8, D: 4}, nil},
		{Config{GlobalBatch: 8, D: 4, Window: 100, Policy: Raise}, nil},
		{Config{GlobalBatch: 10, D: 4}, []string{"B=10", "D=4", "remainder 2"}},
		{Config{GlobalBatch: 0, D: 0}, []string{"B=0", "D=0"}},
		{Config{GlobalBatch: 10, D: 4, Window: -1, Policy: 7}, []string{"remainder 2", "W=-1", "Policy(7)"}},
		{Config{GlobalBatch: 8, D: 4, Window: 1 << 40}, []string{"W=1099511627776"}},
		// Sizes a plan would allocate for, refused before it does.
		{Config{GlobalBatch: 1 << 40, D: 1 << 40}, []string{"B=1099511627776, must be <= 2147483647", "D=1099511627776, must be <= 65536"}},
		{Config{GlobalBatch: 1 << 62, D: 1}, []string{"B=4611686018427387904"}},
		{Config{GlobalBatch: 1 << 26, D: 1 << 26}, []string{"D=67108864, must be <= 65536"}},
		{Config{GlobalBatch: MaxD, D: MaxD}, nil},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		if tt.want == nil {
			if err != nil {
				t.Errorf("%+v.Validate() = %v, want nil", tt.cfg, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v.Validate() = %v, want ErrInvalidConfig", tt.cfg, err)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v.Validate() = %q, want it to contain %q", tt.cfg, err, w)
			}
		}
	}
}

func rowsOf(n ...int64) []RowGroup {
	rgs := make([]RowGroup, len(n))
	for i, r := range n {
		rgs[i] = RowGroup{File: 0, Index: i, Rows: r, Bytes: r * 8}
	}
	return rgs
}

func TestNewPlan(t *testing.T) {
	tests := []struct {
		rows            []int64
		cfg             Config
		steps           int
		dropped, padded int64
		err             error
		msg             []string
	}{
		{[]int64{3, 0, 5, 2}, Config{GlobalBatch: 3, D: 3, Policy: Drop}, 3, 1, 0, nil, nil},
		{[]int64{3, 0, 5, 2}, Config{GlobalBatch: 3, D: 3, Policy: Pad}, 4, 0, 2, nil, nil},
		{[]int64{3, 0, 5, 2}, Config{GlobalBatch: 5, D: 1, Policy: Raise}, 2, 0, 0, nil, nil},
		{[]int64{3, 0, 5, 2}, Config{GlobalBatch: 4, D: 2, Policy: Raise}, 0, 0, 0, ErrIndivisible, []string{"N=10", "B=4", "remainder of 2", "drop", "pad"}},
		{[]int64{3, 0, 5, 2}, Config{GlobalBatch: 16, D: 2, Policy: Drop}, 0, 0, 0, ErrNoSteps, []string{"N=10", "B=16", "pad"}},
		{[]int64{3, 0, 5, 2}, Config{GlobalBatch: 16, D: 2, Policy: Pad}, 1, 0, 6, nil, nil},
		{[]int64{0, 0}, Config{GlobalBatch: 2, D: 1}, 0, 0, 0, ErrEmptyDataset, nil},
		{nil, Config{GlobalBatch: 2, D: 1}, 0, 0, 0, ErrEmptyDataset, nil},
		{[]int64{4, -1}, Config{GlobalBatch: 2, D: 1}, 0, 0, 0, ErrInvalidRowGroup, []string{"row group 1"}},
		{[]int64{4}, Config{GlobalBatch: 3, D: 2}, 0, 0, 0, ErrInvalidConfig, nil},
	}
	for _, tt := range tests {
		p, err := NewPlan(rowsOf(tt.rows...), tt.cfg)
		if tt.err != nil {
			if !errors.Is(err, tt.err) {
				t.Errorf("NewPlan(%v, %+v) error = %v, want %v", tt.rows, tt.cfg, err, tt.err)
			}
			for _, m := range tt.msg {
				if err != nil && !strings.Contains(err.Error(), m) {
					t.Errorf("NewPlan(%v, %+v) error = %q, want it to contain %q", tt.rows, tt.cfg, err, m)
				}
			}
			continue
		}
		if err != nil {
			t.Errorf("NewPlan(%v, %+v) = %v", tt.rows, tt.cfg, err)
			continue
		}
		if p.StepsPerEpoch() != tt.steps || p.DroppedRows() != tt.dropped || p.PaddedRows() != tt.padded {
			t.Errorf("NewPlan(%v, %+v) = steps %d dropped %d padded %d, want %d %d %d", tt.rows, tt.cfg,
				p.StepsPerEpoch(), p.DroppedRows(), p.PaddedRows(), tt.steps, tt.dropped, tt.padded)
		}
	}
}

// TestStreamsByHand checks a plan worked out on paper: row groups of 3, 0, 5, 2
// rows (N = 10), D = 3, so streams of 4, 3, 3 rows covering the epoch sequence
// [0, 4), [4, 7), [7, 10).
func TestStreamsByHand(t *testing.T) {
	p, err := NewPlan(rowsOf(3, 0, 5, 2), Config{GlobalBatch: 3, D: 3, Policy: Pad, Window: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]Segment{
		{{0, 0, 3}, {2, 0, 1}},
		{{2, 1, 4}},
		{{2, 4, 5}, {3, 0, 2}},
	}
	for d, w := range want {
		if got := p.Stream(0, d); !slices.Equal(got, w) {
			t.Errorf("Stream(0, %d) = %v, want %v", d, got, w)
		}
	}
	if got := p.Stream(0, 3); got != nil {
		t.Errorf("Stream(0, 3) = %v, want nil", got)
	}
	for _, tt := range []struct{ step, d, want int }{{0, 0, 1}, {3, 0, 1}, {3, 1, 0}, {3, 2, 0}, {2, 2, 1}, {4, 0, 0}} {
		if got := p.SliceReal(tt.step, tt.d); got != tt.want {
			t.Errorf("SliceReal(%d, %d) = %d, want %d", tt.step, tt.d, got, tt.want)
		}
	}
	for _, tt := range []struct {
		step, d          int
		seg              int
		row, windowStart int64
	}{
		{3, 0, 0, 2, 2}, // row 3 is in window [2, 4), which starts in row group 0 at row 2
		{3, 1, 1, 0, 3}, // stream 1 has no real row at step 3: nothing to read
		{1, 2, 0, 0, 0}, // row 1, window [0, 2)
		{2, 2, 1, 1, 2}, // row 2, window [2, 3): segment 1 (row group 3), its row 1
		{0, 1, 0, 0, 0},
	} {
		seg, row, ws := p.ReadStart(Position{Epoch: 0, Step: tt.step}, tt.d)
		if seg != tt.seg || row != tt.row || ws != tt.windowStart {
			t.Errorf("ReadStart(step %d, %d) = %d, %d, %d, want %d, %d, %d", tt.step, tt.d, seg, row, ws, tt.seg, tt.row, tt.windowStart)
		}
	}
	// Drop, W = 0: 3 steps of b = 1; stream 0 reads rows [0, 3) only.
	q, err := NewPlan(rowsOf(3, 0, 5, 2), Config{GlobalBatch: 3, D: 3, Policy: Drop})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		slices []int
		want   []int
		bytes  int64
	}{
		{[]int{0}, []int{0}, 24},
		{[]int{2}, []int{2, 3}, 56},
		{[]int{1, 0}, []int{0, 2}, 64},
		{[]int{0, 1, 2}, []int{0, 2, 3}, 80},
		{[]int{7}, nil, 0},
	} {
		if got := q.ReadSet(0, tt.slices); !slices.Equal(got, tt.want) {
			t.Errorf("ReadSet(0, %v) = %v, want %v", tt.slices, got, tt.want)
		}
		if got := q.Bytes(0, tt.slices); got != tt.bytes {
			t.Errorf("Bytes(0, %v) = %d, want %d", tt.slices, got, tt.bytes)
		}
	}
	if got, want := q.ReadEnd(0), int64(3); got != want {
		t.Errorf("ReadEnd(0) = %d, want %d", got, want)
	}
}

func TestNextAndCheck(t *testing.T) {
	p, err := NewPlan(rowsOf(10), Config{GlobalBatch: 4, D: 2, Policy: Drop}) // 2 steps
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ in, want Position }{
		{Position{0, 0}, Position{0, 1}},
		{Position{0, 1}, Position{1, 0}},
		{Position{3, 1}, Position{4, 0}},
	} {
		if got := p.Next(tt.in); got != tt.want {
			t.Errorf("Next(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
	for _, tt := range []struct {
		pos    Position
		slices []int
		ok     bool
	}{
		{Position{0, 0}, []int{0, 1}, true},
		{Position{0, 2}, nil, true}, // end of epoch
		{Position{0, 3}, nil, false},
		{Position{-1, 0}, nil, false},
		{Position{0, -1}, nil, false},
		{Position{0, 0}, []int{2}, false},
	} {
		err := p.Check(tt.pos, tt.slices...)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalidPosition)) {
			t.Errorf("Check(%v, %v) = %v, want ok=%v", tt.pos, tt.slices, err, tt.ok)
		}
	}
}

func TestEpochOrders(t *testing.T) {
	rgs := rowsOf(make([]int64, 30)...)
	for i := range rgs {
		rgs[i].Rows = int64(i%4 + 1)
	}
	cfg := Config{GlobalBatch: 4, D: 2, Seed: 11, ShuffleRowGroups: true, Policy: Drop}
	p1, err := NewPlan(rgs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p2, _ := NewPlan(rgs, cfg)
	if a, b := p1.RowGroupOrder(0), p1.RowGroupOrder(1); slices.Equal(a, b) {
		t.Errorf("RowGroupOrder(0) = RowGroupOrder(1) = %v, want different orders", a)
	}
	for e := 0; e < 4; e++ {
		if a, b := p1.RowGroupOrder(e), p2.RowGroupOrder(e); !slices.Equal(a, b) {
			t.Errorf("same seed, epoch %d: %v vs %v", e, a, b)
		}
		got := p1.RowGroupOrder(e)
		sorted := slices.Clone(got)
		slices.Sort(sorted)
		for i, g := range sorted {
			if int(g) != i {
				t.Fatalf("RowGroupOrder(%d) = %v is not a permutation", e, got)
			}
		}
	}
	cfg.Seed = 12
	p3, _ := NewPlan(rgs, cfg)
	if a, b := p1.RowGroupOrder(0), p3.RowGroupOrder(0); slices.Equal(a, b) {
		t.Errorf("seeds 11 and 12 give the same order %v", a)
	}
	cfg.ShuffleRowGroups = false
	p4, _ := NewPlan(rgs, cfg)
	for e := 0; e < 3; e++ {
		for i, g := range p4.RowGroupOrder(e) {
			if int(g) != i {
				t.Fatalf("no shuffle: RowGroupOrder(%d) = %v, want identity", e, p4.RowGroupOrder(e))
			}
		}
	}
	if got := p4.WindowPerm(0, 0, 0); got != nil {
		t.Errorf("W = 0: WindowPerm = %v, want nil", got)
	}
}

// RowsPlan is the plan of one row group of N rows (the demo backend's):
// the same numbers as NewPlan's, and a bad policy named.
func TestRowsPlan(t *testing.T) {
	for _, tc := range []struct {
		rows         int64
		b, d         int
		policy       string
		steps, slice int
		starts       []int64
	}{
		{10, 4, 2, "pad", 3, 2, []int64{0, 5}},
		{10, 4, 2, "drop", 2, 2, []int64{0, 5}},
		{11, 6, 3, "pad", 2, 2, []int64{0, 4, 8}},
		{12, 4, 4, "raise", 3, 1, []int64{0, 3, 6, 9}},
	} {
		p, err := RowsPlan(tc.rows, tc.b, tc.d, tc.policy)
		if err != nil {
			t.Errorf("RowsPlan(%d, %d, %d, %q) = %v", tc.rows, tc.b, tc.d, tc.policy, err)
			continue
		}
		if p.StepsPerEpoch() != tc.steps || p.SliceRows() != tc.slice {
			t.Errorf("RowsPlan(%d, %d, %d, %q): %d steps of %d-row slices, want %d of %d",
				tc.rows, tc.b, tc.d, tc.policy, p.StepsPerEpoch(), p.SliceRows(), tc.steps, tc.slice)
		}
		for d, want := range tc.starts {
			if got := p.StreamStart(d); got != want {
				t.Errorf("RowsPlan(%d, %d, %d, %q).StreamStart(%d) = %d, want %d", tc.rows, tc.b, tc.d, tc.policy, d, got, want)
			}
		}
		if got := p.StreamStart(tc.d); got != 0 {
			t.Errorf("StreamStart(%d) of %d streams = %d, want 0", tc.d, tc.d, got)
		}
	}
	if _, err := RowsPlan(10, 4, 2, "sometimes"); !errors.Is(err, ErrInvalidPolicy) {
		t.Errorf("RowsPlan(policy %q) = %v, want ErrInvalidPolicy", "sometimes", err)
	}
	if _, err := RowsPlan(10, 4, 2, "raise"); !errors.Is(err, ErrIndivisible) || !strings.Contains(err.Error(), "remainder 2") {
		t.Errorf("RowsPlan(10 rows, B=4, raise) = %v, want ErrIndivisible naming the remainder 2", err)
	}
}
