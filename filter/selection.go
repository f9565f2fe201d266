package filter

import (
	"fmt"
	"sort"

	"github.com/apache/arrow-go/v18/arrow"
)

// Run is the physical rows [Lo, Hi) of a row group.
type Run struct{ Lo, Hi int64 }

// Selection is the rows of one row group a predicate keeps: sorted,
// disjoint runs of physical rows. It is immutable once built.
type Selection struct {
	rows int64 // physical rows of the row group
	runs []Run
	cum  []int64 // cum[i]: selected rows before runs[i]; len(runs)+1 entries
}

// NewSelection returns the selection of the runs (sorted, disjoint, within
// [0, rows)), checked.
func NewSelection(rows int64, runs []Run) (*Selection, error) {
	s := &Selection{rows: rows, runs: runs, cum: make([]int64, len(runs)+1)}
	prev := int64(0)
	for i, r := range runs {
		if r.Lo < prev || r.Hi <= r.Lo || r.Hi > rows {
			return nil, fmt.Errorf("filter: selection run %d [%d, %d) is not sorted, disjoint and within the %d rows", i, r.Lo, r.Hi, rows)
		}
		prev = r.Hi
		s.cum[i+1] = s.cum[i] + r.Hi - r.Lo
	}
	return s, nil
}

// AllRows is the selection of every row of a row group of rows rows.
func AllRows(rows int64) *Selection {
	if rows == 0 {
		return &Selection{cum: []int64{0}}
	}
	return &Selection{rows: rows, runs: []Run{{0, rows}}, cum: []int64{0, rows}}
}

// fromMask is the selection of the rows where keep is true.
func fromMask(keep []bool) *Selection {
	var runs []Run
	for i := 0; i < len(keep); {
		if !keep[i] {
			i++
			continue
		}
		j := i
		for j < len(keep) && keep[j] {
			j++
		}
		runs = append(runs, Run{int64(i), int64(j)})
		i = j
	}
	s, _ := NewSelection(int64(len(keep)), runs)
	return s
}

// Rows is the row group's physical rows.
func (s *Selection) Rows() int64 { return s.rows }

// Count is the rows kept.
func (s *Selection) Count() int64 { return s.cum[len(s.cum)-1] }

// All reports whether every row is kept.
func (s *Selection) All() bool { return s.Count() == s.rows }

// Runs returns the selection's runs (not to be modified).
func (s *Selection) Runs() []Run { return s.runs }

// Bytes estimates the selection's memory.
func (s *Selection) Bytes() int64 { return 64 + int64(len(s.runs))*24 }

// Physical maps the kept rows [lo, hi) (numbered 0..Count()-1) to the
// physical rows that hold them, [plo, phi) (the first's row to the last's
// row + 1). lo < hi <= Count().
func (s *Selection) Physical(lo, hi int64) (plo, phi int64) {
	return s.physical(lo), s.physical(hi-1) + 1
}

// physical is the physical row of kept row k.
func (s *Selection) physical(k int64) int64 {
	i := sort.Search(len(s.runs), func(i int) bool { return s.cum[i+1] > k })
	return s.runs[i].Lo + k - s.cum[i]
}

// Slice returns the runs of the kept rows [lo, hi), relative to physical
// row base (so that base is row 0 of a record read from there).
func (s *Selection) Slice(lo, hi, base int64) []Run {
	var out []Run
	i := sort.Search(len(s.runs), func(i int) bool { return s.cum[i+1] > lo })
	for ; i < len(s.runs) && s.cum[i] < hi; i++ {
		r := s.runs[i]
		a := r.Lo + max(lo-s.cum[i], 0)
		b := r.Lo + min(hi-s.cum[i], r.Hi-r.Lo)
		out = append(out, Run{a - base, b - base})
	}
	return out
}

// Prune is the predicate's verdict on a row group whose columns' statistics
// stats gives (by column name).
func (b *Bound) Prune(stats func(column string) ColumnStats) Verdict {
	out := None
	for _, conj := range b.any {
		v := All
		for _, m := range conj {
			switch m.prune(stats(m.column())) {
			case None:
				v = None
			case Some:
				if v == All {
					v = Some
				}
			}
			if v == None {
				break
			}
		}
		switch {
		case v == All:
			return All
		case v == Some:
			out = Some
		}
	}
	return out
}

// Eval returns the rows of rec (a row group's decoded filter columns, at
// least) that the predicate keeps: each term a typed loop over its column
// (eval.go), the terms of a conjunction and-ed, the conjunctions or-ed.
func (b *Bound) Eval(rec arrow.RecordBatch) (*Selection, error) {
	n := int(rec.NumRows())
	cols := map[string]arrow.Array{}
	for i, f := range rec.Schema().Fields() {
		cols[f.Name] = rec.Column(i)
	}
	keep := make([]bool, n)
	var conj, term []bool
	for ci, c := range b.any {
		switch {
		case len(b.any) == 1:
			conj = keep // the only conjunction: its result is the selection
		case conj == nil:
			conj = make([]bool, n)
		}
		if len(c) == 0 {
			fill(conj, true)
		}
		for ti, m := range c {
			arr, ok := cols[m.column()]
			if !ok {
				return nil, fmt.Errorf("filter: %w: column %q is not among the decoded columns", ErrInvalid, m.column())
			}
			dst := conj
			if ti > 0 {
				if term == nil {
					term = make([]bool, n)
				}
				dst = term
			}
			if err := m.eval(arr, dst); err != nil {
				return nil, fmt.Errorf("filter: %w", err)
			}
			if ti > 0 {
				for i, t := range term {
					conj[i] = conj[i] && t
				}
			}
		}
		if len(b.any) > 1 {
			if ci == 0 {
				copy(keep, conj)
				continue
			}
			for i, t := range conj {
				keep[i] = keep[i] || t
			}
		}
	}
	return fromMask(keep), nil
}
