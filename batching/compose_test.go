package batching

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
)

// randomWeights draws n weights: some zero, some tiny, some equal.
func randomWeights(r *rand.Rand, n int) []float64 {
	w := make([]float64, n)
	for {
		for i := range w {
			switch r.IntN(6) {
			case 0:
				w[i] = 0
			case 1:
				w[i] = r.Float64() * 1e-3
			case 2:
				w[i] = 1
			default:
				w[i] = r.Float64() * 10
			}
		}
		for _, v := range w {
			if v > 0 {
				return w
			}
		}
	}
}

// TestCompositionBounds walks random compositions and holds every step to the
// contract: per step the counts sum to b and are >= 0; cumulatively, within
// each weight span, |C_i(k) - k*b*u_i/U| < 1 exactly (big rationals), and
// within one row plus the quantization's share of the float weights' quota.
func TestCompositionBounds(t *testing.T) {
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, 0))
	for trial := 0; trial < 300; trial++ {
		n := r.IntN(6) + 1
		b := []int{1, 2, 3, 7, 16, 100, 1000}[r.IntN(7)]
		spans := []WeightSpan{{FromStep: 0, Weights: randomWeights(r, n)}}
		for s := r.IntN(3); s > 0; s-- {
			spans = append(spans, WeightSpan{FromStep: spans[len(spans)-1].FromStep + r.IntN(50) + 1, Weights: randomWeights(r, n)})
		}
		c, err := NewComposition(b, spans)
		if err != nil {
			t.Fatalf("trial %d: NewComposition(%d, %v): %v", trial, b, spans, err)
		}
		w := c.Walk()
		counts := make([]int64, n)
		base := make([]int64, n)
		span := 0
		steps := spans[len(spans)-1].FromStep + r.IntN(300) + 1
		for s := 0; s < steps; s++ {
			if span+1 < len(spans) && spans[span+1].FromStep == s {
				span++
				copy(base, w.Cum())
			}
			if err := w.Next(counts); err != nil {
				t.Fatalf("trial %d b=%d spans=%v step %d: %v", trial, b, spans, s, err)
			}
			var sum int64
			for i, v := range counts {
				if v < 0 {
					t.Fatalf("trial %d step %d: source %d count %d < 0", trial, s, i, v)
				}
				sum += v
			}
			if sum != int64(b) {
				t.Fatalf("trial %d step %d: counts %v sum to %d, want b=%d", trial, s, counts, sum, b)
			}
			sp := c.spans[span]
			k := int64(s - sp.from + 1)
			for i := range counts {
				got := w.Cum()[i] - base[i]
				// exact: |got*U - k*b*u| < U
				diff := new(big.Int).Sub(new(big.Int).Mul(big.NewInt(got), new(big.Int).SetUint64(sp.total)),
					new(big.Int).Mul(big.NewInt(k*int64(b)), new(big.Int).SetUint64(sp.u[i])))
				if diff.CmpAbs(new(big.Int).SetUint64(sp.total)) >= 0 {
					t.Fatalf("trial %d b=%d spans=%v step %d source %d: C=%d, quota %d*%d*%d/%d: off by a row or more", trial, b, spans, s, i, got, k, b, sp.u[i], sp.total)
				}
				var tot float64
				for _, v := range spans[span].Weights {
					tot += v
				}
				q := float64(k) * float64(b) * spans[span].Weights[i] / tot
				if math.Abs(float64(got)-q) >= 1+float64(k*int64(b))*0x1p-31 {
					t.Fatalf("trial %d step %d source %d: C=%d, float quota %v", trial, s, i, got, q)
				}
			}
		}
		// The walker is a pure function of the step: a second walk agrees.
		w2 := c.Walk()
		if err := w2.Skip(steps); err != nil {
			t.Fatal(err)
		}
		for i := range counts {
			if w2.Cum()[i] != w.Cum()[i] {
				t.Fatalf("trial %d: second walk C_%d(%d) = %d, first %d", trial, i, steps, w2.Cum()[i], w.Cum()[i])
			}
		}
	}
}

func TestQuantizeWeightsErrors(t *testing.T) {
	for _, tc := range []struct {
		w    []float64
		want string
	}{
		{[]float64{1, -1}, "source 1: weight -1 is negative"},
		{[]float64{math.NaN(), 1}, "source 0: weight is NaN"},
		{[]float64{0, 0}, "every weight is 0"},
		{[]float64{1, math.Inf(1)}, "source 1: weight +Inf is not finite"},
		{[]float64{1, 1e-12}, "source 1: weight 1e-12 is positive but below"},
		{nil, "no sources"},
	} {
		_, err := QuantizeWeights(tc.w)
		if !errors.Is(err, ErrInvalidWeights) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("QuantizeWeights(%v) = %v, want an ErrInvalidWeights naming %q", tc.w, err, tc.want)
		}
	}
}

// TestDecimalWeightsExact: short decimal weights keep their exact
// proportions, so an integer quota is met exactly.
func TestDecimalWeightsExact(t *testing.T) {
	for _, tc := range []struct {
		w    []float64
		want []uint64
	}{
		{[]float64{0.5, 0.3, 0.2}, []uint64{5, 3, 2}},
		{[]float64{2, 1, 0}, []uint64{2, 1, 0}},
		{[]float64{0.125, 1}, []uint64{125, 1000}},
	} {
		u, err := QuantizeWeights(tc.w)
		if err != nil || fmt.Sprint(u) != fmt.Sprint(tc.want) {
			t.Errorf("QuantizeWeights(%v) = %v, %v, want %v", tc.w, u, err, tc.want)
		}
	}
	c, err := NewComposition(8, []WeightSpan{{Weights: []float64{0.5, 0.3, 0.2}}})
	if err != nil {
		t.Fatal(err)
	}
	w := c.Walk()
	if err := w.Skip(5); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(w.Cum()); got != "[20 12 8]" {
		t.Errorf("after 5 steps of 8 rows at 0.5/0.3/0.2: %s, want [20 12 8]", got)
	}
}

// TestWalkerClone: a clone walks on from its original's step independently
// of it (across a change of weights), giving the counts a fresh walk gives.
func TestWalkerClone(t *testing.T) {
	c, err := NewComposition(12, []WeightSpan{{Weights: []float64{0.5, 0.3, 0.2}}, {FromStep: 9, Weights: []float64{1, 0, 3}}})
	if err != nil {
		t.Fatal(err)
	}
	w := c.Walk()
	if err := w.Skip(4); err != nil {
		t.Fatal(err)
	}
	clone := w.Clone()
	fresh := c.Walk()
	if err := fresh.Skip(4); err != nil {
		t.Fatal(err)
	}
	counts := make([]int64, 3)
	for range 3 { // the original moves on; the clone stays at step 4
		if err := w.Next(counts); err != nil {
			t.Fatal(err)
		}
	}
	got, want := make([]int64, 3), make([]int64, 3)
	for s := 4; s < 20; s++ {
		if clone.Step() != s {
			t.Fatalf("the clone is at step %d, want %d", clone.Step(), s)
		}
		if err := clone.Next(got); err != nil {
			t.Fatal(err)
		}
		if err := fresh.Next(want); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got, clone.Cum()) != fmt.Sprint(want, fresh.Cum()) {
			t.Fatalf("step %d: the clone counts %v (cum %v), a fresh walk %v (cum %v)", s, got, clone.Cum(), want, fresh.Cum())
		}
	}
}
