package filter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Op is a term's comparison.
type Op int

const (
	// Eq is == (pyarrow also accepts =).
	Eq Op = iota
	// Ne is !=.
	Ne
	// Lt is <.
	Lt
	// Le is <=.
	Le
	// Gt is >.
	Gt
	// Ge is >=.
	Ge
	// In is "in": the value is a list.
	In
	// NotIn is "not in": the value is a list.
	NotIn
)

var opNames = [...]string{Eq: "==", Ne: "!=", Lt: "<", Le: "<=", Gt: ">", Ge: ">=", In: "in", NotIn: "not in"}

// String returns the op as pyarrow spells it.
func (o Op) String() string {
	if o >= 0 && int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// parseOp reads an op; "=" is ==.
func parseOp(s string) (Op, bool) {
	if s == "=" {
		return Eq, true
	}
	for o, n := range opNames {
		if n == s {
			return Op(o), true
		}
	}
	return 0, false
}

// Term is one (column, op, value) predicate.
type Term struct {
	Column string
	Op     Op
	// Value is the compared value (ops ==, !=, <, <=, >, >=).
	Value Value
	// Set is the list of In and NotIn.
	Set []Value
}

// Predicate is a disjunction (Any) of conjunctions of terms: a row is kept
// when every term of some conjunction keeps it.
type Predicate struct {
	Any [][]Term
}

// MaxTerms bounds the terms of a predicate and MaxSet the values of one
// "in" list; longer predicates are refused by Parse.
const (
	MaxTerms = 1024
	MaxSet   = 1 << 16
)

// Parse reads the JSON form of pyarrow's filters (docs/PROTOCOL.md,
// "Filters"): a list of terms (one conjunction) or a list of lists of terms
// (a disjunction of conjunctions), each term an object {"column", "op",
// "value"} or a three-element array [column, op, value]. Values are typed as
// that section says. Every problem is reported at once, in one error
// wrapping ErrInvalid.
func Parse(data []byte) (*Predicate, error) {
	var top []json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("filter: %w: filters must be a JSON list of terms or of lists of terms: %v", ErrInvalid, err)
	}
	if len(top) == 0 {
		return nil, fmt.Errorf("filter: %w: filters is an empty list (leave it out to keep every row)", ErrInvalid)
	}
	var groups []json.RawMessage
	if isTerm(top[0]) {
		groups = []json.RawMessage{data}
	} else {
		groups = top
	}
	var p Predicate
	var problems []string
	n := 0
	for gi, g := range groups {
		var raw []json.RawMessage
		if err := json.Unmarshal(g, &raw); err != nil || len(raw) == 0 {
			problems = append(problems, fmt.Sprintf("filters[%d]: want a non-empty list of terms", gi))
			continue
		}
		var conj []Term
		for ti, rt := range raw {
			n++
			t, err := parseTerm(rt)
			if err != nil {
				problems = append(problems, fmt.Sprintf("filters[%d][%d]: %v", gi, ti, err))
				continue
			}
			conj = append(conj, t)
		}
		p.Any = append(p.Any, conj)
	}
	if n > MaxTerms {
		problems = append(problems, fmt.Sprintf("%d terms, over the limit of %d", n, MaxTerms))
	}
	switch len(problems) {
	case 0:
		return &p, nil
	case 1:
		return nil, fmt.Errorf("filter: %w: %s", ErrInvalid, problems[0])
	default:
		return nil, fmt.Errorf("filter: %w: %d problems: %s", ErrInvalid, len(problems), strings.Join(problems, "; "))
	}
}

// isTerm reports whether raw is a term (an object, or an array whose first
// element is a string) rather than a list of terms.
func isTerm(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '{' {
		return true
	}
	var arr []json.RawMessage
	if json.Unmarshal(raw, &arr) != nil || len(arr) == 0 {
		return false
	}
	var s string
	return json.Unmarshal(arr[0], &s) == nil
}

// parseTerm reads one term in either form.
func parseTerm(raw json.RawMessage) (Term, error) {
	var col, op string
	var val json.RawMessage
	if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '{' {
		var obj struct {
			Column *string          `json:"column"`
			Op     *string          `json:"op"`
			Value  *json.RawMessage `json:"value"`
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&obj); err != nil {
			return Term{}, fmt.Errorf("want {\"column\", \"op\", \"value\"}: %v", err)
		}
		if obj.Column == nil || obj.Op == nil || obj.Value == nil {
			return Term{}, fmt.Errorf("want the three fields \"column\", \"op\" and \"value\"")
		}
		col, op, val = *obj.Column, *obj.Op, *obj.Value
	} else {
		var arr []json.RawMessage
		if err := json.Unmarshal(raw, &arr); err != nil || len(arr) != 3 {
			return Term{}, fmt.Errorf("want [column, op, value] or {\"column\", \"op\", \"value\"}, got %s", abbrev(raw))
		}
		if json.Unmarshal(arr[0], &col) != nil || json.Unmarshal(arr[1], &op) != nil {
			return Term{}, fmt.Errorf("the column and the op must be strings, got %s", abbrev(raw))
		}
		val = arr[2]
	}
	if col == "" {
		return Term{}, fmt.Errorf("empty column name")
	}
	o, ok := parseOp(op)
	if !ok {
		return Term{}, fmt.Errorf("column %q: op %q is unknown: want one of ==, =, !=, <, <=, >, >=, in, not in", col, op)
	}
	t := Term{Column: col, Op: o}
	if o == In || o == NotIn {
		var items []json.RawMessage
		if err := json.Unmarshal(val, &items); err != nil {
			return Term{}, fmt.Errorf("column %q: %q wants a list of values, got %s", col, op, abbrev(val))
		}
		if len(items) > MaxSet {
			return Term{}, fmt.Errorf("column %q: %q list of %d values, over the limit of %d", col, op, len(items), MaxSet)
		}
		t.Set = make([]Value, len(items))
		for i, it := range items {
			v, err := parseValue(it)
			if err != nil {
				return Term{}, fmt.Errorf("column %q: %q list item %d: %v", col, op, i, err)
			}
			t.Set[i] = v
		}
		return t, nil
	}
	v, err := parseValue(val)
	if err != nil {
		return Term{}, fmt.Errorf("column %q: %v", col, err)
	}
	t.Value = v
	return t, nil
}

// abbrev returns raw for an error message, cut to 80 bytes.
func abbrev(raw json.RawMessage) string {
	s := string(bytes.TrimSpace(raw))
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

// Columns returns the columns the predicate reads, each once, in order of
// first use.
func (p *Predicate) Columns() []string {
	var out []string
	seen := map[string]bool{}
	for _, c := range p.Any {
		for _, t := range c {
			if !seen[t.Column] {
				seen[t.Column] = true
				out = append(out, t.Column)
			}
		}
	}
	return out
}

// Canonical returns the predicate's canonical JSON form: a list of lists of
// {"column", "op", "value"} objects, ops spelled as Op.String, values in
// their canonical form. Two predicates with the same canonical form keep the
// same rows; it is the predicate's part of a cache key.
func (p *Predicate) Canonical() string {
	var b strings.Builder
	b.WriteByte('[')
	for i, c := range p.Any {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('[')
		for j, t := range c {
			if j > 0 {
				b.WriteByte(',')
			}
			col, _ := json.Marshal(t.Column)
			fmt.Fprintf(&b, `{"column":%s,"op":%q,"value":`, col, t.Op.String())
			if t.Op == In || t.Op == NotIn {
				b.WriteByte('[')
				for k, v := range t.Set {
					if k > 0 {
						b.WriteByte(',')
					}
					b.WriteString(v.canonical())
				}
				b.WriteByte(']')
			} else {
				b.WriteString(t.Value.canonical())
			}
			b.WriteByte('}')
		}
		b.WriteByte(']')
	}
	b.WriteByte(']')
	return b.String()
}
