package filter

import (
	"github.com/apache/arrow-go/v18/arrow"
)

// ordMatcher is a term over a column read as T, ordered by cmp.
type ordMatcher[T comparable] struct {
	col   string
	op    Op
	konst int8 // comparisons: -1 compare with c; 0 or 1: that result for every non-null row
	c     T
	set   map[T]struct{} // In, NotIn
	// setNull: the set holds None (matches nulls); setNaN: it holds NaN.
	setNull, setNaN bool
	cmp             func(a, b T) int
	get             func(arrow.Array) (getter[T], bool)
	nan             func(T) bool // float columns only
}

func (m *ordMatcher[T]) column() string { return m.col }

func (m *ordMatcher[T]) operator() Op { return m.op }

// nullMatches is whether a null row matches.
func (m *ordMatcher[T]) nullMatches() bool {
	switch m.op {
	case In:
		return m.setNull
	case NotIn:
		return !m.setNull
	}
	return false
}

// inSet reports whether v is in the set (NaN matching a NaN member).
func (m *ordMatcher[T]) inSet(v T) bool {
	if m.nan != nil && m.nan(v) {
		return m.setNaN
	}
	_, ok := m.set[v]
	return ok
}

// match reports whether the non-null value v matches.
func (m *ordMatcher[T]) match(v T) bool {
	switch m.op {
	case In:
		return m.inSet(v)
	case NotIn:
		return !m.inSet(v)
	}
	if m.konst >= 0 {
		return m.konst == 1
	}
	if m.nan != nil && m.nan(v) {
		return m.op == Ne
	}
	c := m.cmp(v, m.c)
	switch m.op {
	case Eq:
		return c == 0
	case Ne:
		return c != 0
	case Lt:
		return c < 0
	case Le:
		return c <= 0
	case Gt:
		return c > 0
	}
	return c >= 0
}

// prune is the term's verdict on a row group with statistics st: its
// bounds and null count, then, where they leave it undecided, its
// dictionary.
func (m *ordMatcher[T]) prune(st ColumnStats) Verdict {
	v := m.pruneStats(st)
	if v == Some && st.Dict != nil {
		v = m.pruneDict(st)
	}
	if v == Some && st.Bloom != nil {
		v = m.pruneBloom(st)
	}
	return v
}

// pruneBloom is the verdict of the chunk's bloom filter on == and in: None
// when it holds none of the values (and no null row matches).
func (m *ordMatcher[T]) pruneBloom(st ColumnStats) Verdict {
	switch {
	case m.op == Eq && m.konst < 0:
		if !st.Bloom.MayContain(any(m.c)) {
			return None
		}
	case m.op == In:
		if m.setNaN || (m.setNull && (!st.NullsKnown || st.Nulls > 0)) {
			return Some
		}
		for v := range m.set {
			if st.Bloom.MayContain(any(v)) {
				return Some
			}
		}
		return None
	}
	return Some
}

// pruneDict is the verdict of the chunk's dictionary st.Dict: None when no
// value of it matches (and no null row does), All when every value does
// and the chunk has no null (or nulls match).
func (m *ordMatcher[T]) pruneDict(st ColumnStats) Verdict {
	g, err := getterOf(st.Dict, m.get)
	if err != nil || st.Dict.NullN() > 0 {
		return Some
	}
	anyMatch, allMatch := false, true
	for i := range st.Dict.Len() {
		if m.match(g(i)) {
			anyMatch = true
		} else {
			allMatch = false
		}
	}
	nm := m.nullMatches()
	mayNull := !st.NullsKnown || st.Nulls > 0
	switch {
	case !anyMatch && !(nm && mayNull):
		return None
	case allMatch && (nm || (st.NullsKnown && st.Nulls == 0)):
		return All
	}
	return Some
}

// pruneStats is the verdict of the statistics' bounds and null count.
//
// Length: one short rule per op, each with its reason; float columns
// (whose statistics exclude NaN) never get All, nor None where NaN matches.
func (m *ordMatcher[T]) pruneStats(st ColumnStats) Verdict {
	if st.Rows == 0 {
		return None
	}
	noNull := st.NullsKnown && st.Nulls == 0
	nm := m.nullMatches()
	if st.NullsKnown && st.Nulls >= st.Rows {
		if nm {
			return All
		}
		return None
	}
	float := m.nan != nil
	isSet := m.op == In || m.op == NotIn
	if !isSet && m.konst == 0 {
		return None
	}
	if !isSet && m.konst == 1 {
		if noNull {
			return All
		}
		return Some
	}
	if st.MinMax == nil || st.MinMax.Len() != 2 || st.MinMax.NullN() > 0 {
		return Some
	}
	g, err := getterOf(st.MinMax, m.get)
	if err != nil {
		return Some
	}
	lo, hi := g(0), g(1)
	if float && (m.nan(lo) || m.nan(hi)) {
		return Some
	}
	single := m.cmp(lo, hi) == 0
	exact := !float && noNull // every row is a non-null, non-NaN value in [lo, hi]
	verdict := func(none, all bool) Verdict {
		switch {
		case none:
			return None
		case all && exact:
			return All
		}
		return Some
	}
	switch m.op {
	case Eq:
		return verdict(m.cmp(m.c, lo) < 0 || m.cmp(m.c, hi) > 0, single && m.cmp(lo, m.c) == 0)
	case Ne:
		return verdict(!float && single && m.cmp(lo, m.c) == 0, m.cmp(m.c, lo) < 0 || m.cmp(m.c, hi) > 0)
	case Lt:
		return verdict(m.cmp(lo, m.c) >= 0, m.cmp(hi, m.c) < 0)
	case Le:
		return verdict(m.cmp(lo, m.c) > 0, m.cmp(hi, m.c) <= 0)
	case Gt:
		return verdict(m.cmp(hi, m.c) <= 0, m.cmp(lo, m.c) > 0)
	case Ge:
		return verdict(m.cmp(hi, m.c) < 0, m.cmp(lo, m.c) >= 0)
	}
	anyIn := false
	for v := range m.set {
		if m.cmp(v, lo) >= 0 && m.cmp(v, hi) <= 0 {
			anyIn = true
			break
		}
	}
	mayNull := !noNull
	if m.op == In {
		none := !anyIn && !(m.setNull && mayNull) && !(float && m.setNaN)
		return verdict(none, single && m.inSet(lo))
	}
	none := !float && single && m.inSet(lo) && (noNull || m.setNull)
	return verdict(none, !anyIn)
}
