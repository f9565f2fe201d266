package filter

import (
	"errors"
	"testing"
)

// FuzzParse: any input either parses or fails with ErrInvalid (never a
// panic), and a parsed predicate's canonical form parses to the same
// canonical form.
//
//	go test ./filter -run '^$' -fuzz FuzzParse -fuzztime 30s
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`[["a", "==", 1]]`,
		`[[["a", "in", [1, 2.5, null, "x"]]], [["b", "not in", []]]]`,
		`[{"column": "t", "op": "<", "value": {"timestamp": "2020-01-02T03:04:05.5+01:00"}}]`,
		`[["d", ">=", {"decimal": "-1.25"}], ["e", "=", {"date": "2020-02-29"}], ["f", "!=", {"float": "nan"}]]`,
		`[["b", "==", {"bytes": "AAE="}]]`, `[]`, `{}`, `[[]]`, `[["a", "~", 1]]`, `[["a", "in", 3]]`,
		`[["a", ">", 1e400]]`, `[["a", ">", 123456789012345678901234567890]]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse(%q) = %v, want an error wrapping ErrInvalid", data, err)
			}
			return
		}
		c := p.Canonical()
		q, err := Parse([]byte(c))
		if err != nil {
			t.Fatalf("Parse(Canonical(%q)) = %v; canonical %s", data, err, c)
		}
		if q.Canonical() != c {
			t.Fatalf("canonical form does not round-trip: %s then %s", c, q.Canonical())
		}
	})
}
