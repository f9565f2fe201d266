package filter

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/meshfeed/meshfeed/internal/testseed"
)

// randomFileSelection is a file of random row groups, each with rows kept
// in random runs (none, all, scattered).
func randomFileSelection(r *rand.Rand) *FileSelection {
	fs := &FileSelection{RowGroups: make([]*Selection, r.IntN(6))}
	for i := range fs.RowGroups {
		rows := int64(r.IntN(3000))
		if r.IntN(10) == 0 {
			rows = 1 << 40 // large counts take the long varints
		}
		switch r.IntN(4) {
		case 0:
			fs.RowGroups[i] = AllRows(rows)
			continue
		case 1:
			fs.RowGroups[i], _ = NewSelection(rows, nil)
			continue
		}
		keep := make([]bool, min(rows, 5000))
		p := r.Float64()
		for j := range keep {
			keep[j] = r.Float64() < p
		}
		s := fromMask(keep)
		fs.RowGroups[i], _ = NewSelection(rows, s.runs)
	}
	return fs
}

// TestSelectionCodecRoundTrip: a random file selection decodes to what was
// encoded, and every strict prefix of the encoding (a truncated fact) and
// the encoding with a byte appended are refused, never misread.
func TestSelectionCodecRoundTrip(t *testing.T) {
	seed := testseed.Get(t, 0, "")
	r := rand.New(rand.NewPCG(seed, 7))
	for n := range 300 {
		fs := randomFileSelection(r)
		enc := EncodeFileSelection(fs)
		got, err := DecodeFileSelection(enc)
		if err != nil {
			t.Fatalf("case %d: decode: %v", n, err)
		}
		if len(got.RowGroups) != len(fs.RowGroups) {
			t.Fatalf("case %d: %d row groups, want %d", n, len(got.RowGroups), len(fs.RowGroups))
		}
		for i, s := range fs.RowGroups {
			g := got.RowGroups[i]
			if g.Rows() != s.Rows() || g.Count() != s.Count() || !slices.Equal(g.Runs(), s.Runs()) {
				t.Fatalf("case %d row group %d: got rows %d runs %v, want rows %d runs %v", n, i, g.Rows(), g.Runs(), s.Rows(), s.Runs())
			}
		}
		for cut := range len(enc) {
			if _, err := DecodeFileSelection(enc[:cut]); !errors.Is(err, ErrInvalid) {
				t.Fatalf("case %d: the first %d of %d bytes decoded (err %v), want ErrInvalid", n, cut, len(enc), err)
			}
		}
		if _, err := DecodeFileSelection(append(slices.Clone(enc), 0)); !errors.Is(err, ErrInvalid) {
			t.Fatalf("case %d: a trailing byte decoded (err %v), want ErrInvalid", n, err)
		}
	}
}

// TestSelectionCodecRefusesBadRuns: runs out of order, overlapping, empty
// or past the row group are refused.
func TestSelectionCodecRefusesBadRuns(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"past the rows", []byte{1, 10, 1, 5, 6}},
		{"empty run", []byte{1, 10, 1, 2, 0}},
		{"overlapping (gap 0 after a run is fine, so two runs past rows)", []byte{1, 10, 2, 0, 6, 0, 6}},
		{"huge count", []byte{0xff, 0xff, 0xff, 0xff, 0x0f}},
	} {
		if fs, err := DecodeFileSelection(tc.b); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: decoded %+v (err %v), want ErrInvalid", tc.name, fs, err)
		}
	}
}
