package filter

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/internal/testseed"
)

var seedFlag = flag.Uint64("filter.seed", 0, "seed of the randomized tests of package filter (0: from MESHFEED_SEED or the clock)")

// testRecord is a small record with every supported kind of column and
// nulls, NaN and a dictionary.
func testRecord(t *testing.T) arrow.RecordBatch {
	t.Helper()
	mem := memory.NewGoAllocator()
	ts := &arrow.TimestampType{Unit: arrow.Microsecond}
	tsz := &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"}
	dt := &arrow.Decimal128Type{Precision: 10, Scale: 2}
	dict := &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "i", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "f", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "ds", Type: dict, Nullable: true},
		{Name: "b", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
		{Name: "ts", Type: ts, Nullable: true},
		{Name: "tz", Type: tsz, Nullable: true},
		{Name: "d", Type: dt, Nullable: true},
		{Name: "day", Type: arrow.FixedWidthTypes.Date32, Nullable: true},
		{Name: "u", Type: arrow.PrimitiveTypes.Uint64, Nullable: true},
		{Name: "i8", Type: arrow.PrimitiveTypes.Int8},
	}, nil)
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	b.Field(0).(*array.Int64Builder).AppendValues([]int64{1, 2, 0, 4, 5}, []bool{true, true, false, true, true})
	b.Field(1).(*array.Float64Builder).AppendValues([]float64{1, 0, 3, math.NaN(), -0.5}, []bool{true, false, true, true, true})
	b.Field(2).(*array.StringBuilder).AppendValues([]string{"x", "y", "", "x", "zz"}, []bool{true, true, false, true, true})
	db := b.Field(3).(*array.BinaryDictionaryBuilder)
	for _, v := range []string{"x", "y", "", "x", "zz"} {
		if v == "" {
			db.AppendNull()
		} else {
			_ = db.AppendString(v)
		}
	}
	b.Field(4).(*array.BooleanBuilder).AppendValues([]bool{true, false, false, true, false}, []bool{true, true, false, true, true})
	// 2020-01-01, null, 2021-01-01, 2022-01-01 00:00:00.5, 2019-12-31
	b.Field(5).(*array.TimestampBuilder).AppendValues([]arrow.Timestamp{1577836800000000, 0, 1609459200000000, 1640995200500000, 1577750400000000}, []bool{true, false, true, true, true})
	b.Field(6).(*array.TimestampBuilder).AppendValues([]arrow.Timestamp{1577836800000, 1577836800001, 0, 1, 2}, []bool{true, true, false, true, true})
	b.Field(7).(*array.Decimal128Builder).AppendValues([]decimal128.Num{decimal128.FromI64(150), decimal128.FromI64(0), decimal128.FromI64(225), decimal128.FromI64(-1), decimal128.FromI64(100)}, []bool{true, false, true, true, true})
	b.Field(8).(*array.Date32Builder).AppendValues([]arrow.Date32{18262, 18263, 0, 18262, 1}, []bool{true, true, false, true, true})
	b.Field(9).(*array.Uint64Builder).AppendValues([]uint64{math.MaxUint64, 0, 7, 1 << 63, 3}, nil)
	b.Field(10).(*array.Int8Builder).AppendValues([]int8{-128, 0, 127, 5, 6}, nil)
	return b.NewRecordBatch()
}

func kept(t *testing.T, rec arrow.RecordBatch, js string) []int64 {
	t.Helper()
	p, err := Parse([]byte(js))
	if err != nil {
		t.Fatalf("Parse(%s) = %v", js, err)
	}
	b, err := Bind(p, rec.Schema())
	if err != nil {
		t.Fatalf("Bind(%s) = %v", js, err)
	}
	sel, err := b.Eval(rec)
	if err != nil {
		t.Fatalf("Eval(%s) = %v", js, err)
	}
	out := []int64{}
	for _, r := range sel.Runs() {
		for i := r.Lo; i < r.Hi; i++ {
			out = append(out, i)
		}
	}
	return out
}

// TestEval holds pyarrow's semantics (the Python tests compare with pyarrow
// itself on files; these are its answers on the same kinds of values).
func TestEval(t *testing.T) {
	rec := testRecord(t)
	defer rec.Release()
	for _, tc := range []struct {
		filters string
		want    []int64
	}{
		{`[["i", ">=", 2]]`, []int64{1, 3, 4}},
		{`[["i", "=", 2]]`, []int64{1}},
		{`[["i", "!=", 2]]`, []int64{0, 3, 4}}, // the null row compares false
		{`[["i", "<", 2.5]]`, []int64{0, 1}},
		{`[["i", "<=", 1.5]]`, []int64{0}},
		{`[["i", ">", 1.5]]`, []int64{1, 3, 4}},
		{`[["i", "==", 1.5]]`, []int64{}},
		{`[["i", "!=", 1.5]]`, []int64{0, 1, 3, 4}},
		{`[["i", "==", null]]`, []int64{}},
		{`[["i", "!=", null]]`, []int64{}},
		{`[["i", "in", [1, 5, 99]]]`, []int64{0, 4}},
		{`[["i", "in", [null]]]`, []int64{2}},
		{`[["i", "not in", [1, 5]]]`, []int64{1, 2, 3}}, // not in keeps nulls
		{`[["i", "not in", [1, null]]]`, []int64{1, 3, 4}},
		{`[["i", "in", []]]`, []int64{}},
		{`[["i", "not in", []]]`, []int64{0, 1, 2, 3, 4}},
		{`[["i", ">", {"float": "inf"}]]`, []int64{}},
		{`[["i", "<", {"float": "inf"}]]`, []int64{0, 1, 3, 4}},
		{`[["i", "!=", {"float": "nan"}]]`, []int64{0, 1, 3, 4}},
		{`[["i", "==", 99999999999999999999999]]`, []int64{}},
		{`[["i8", ">", 1000]]`, []int64{}},
		{`[["i8", ">=", -1000]]`, []int64{0, 1, 2, 3, 4}},
		{`[["f", ">", 0]]`, []int64{0, 2}},
		{`[["f", "!=", 1]]`, []int64{2, 3, 4}}, // NaN != 1
		{`[["f", "==", {"float": "nan"}]]`, []int64{}},
		{`[["f", "!=", {"float": "nan"}]]`, []int64{0, 2, 3, 4}},
		{`[["f", ">", {"float": "nan"}]]`, []int64{}},
		{`[["f", "in", [{"float": "nan"}]]]`, []int64{3}},
		{`[["f", "not in", [{"float": "nan"}]]]`, []int64{0, 1, 2, 4}},
		{`[["s", "==", "x"]]`, []int64{0, 3}},
		{`[["s", ">", "x"]]`, []int64{1, 4}},
		{`[["ds", "==", "x"]]`, []int64{0, 3}},
		{`[["ds", "in", ["y", "zz"]]]`, []int64{1, 4}},
		{`[["ds", "not in", ["y"]]]`, []int64{0, 2, 3, 4}},
		{`[["b", "==", true]]`, []int64{0, 3}},
		{`[["b", "!=", true]]`, []int64{1, 4}},
		{`[["ts", ">", {"timestamp": "2020-06-01T00:00:00"}]]`, []int64{2, 3}},
		{`[["ts", ">=", {"date": "2020-01-01"}]]`, []int64{0, 2, 3}},
		{`[["ts", "==", {"timestamp": "2022-01-01T00:00:00.5"}]]`, []int64{3}},
		{`[["ts", "<", {"timestamp": "2022-01-01T00:00:00.0000005"}]]`, []int64{0, 2, 4}},
		{`[["tz", "<=", {"timestamp": "2020-01-01T00:00:00Z"}]]`, []int64{0, 3, 4}},
		{`[["tz", ">", {"timestamp": "2020-01-01T01:00:00+01:00"}]]`, []int64{1}},
		{`[["d", ">", {"decimal": "1"}]]`, []int64{0, 2}},
		{`[["d", ">=", 1]]`, []int64{0, 2, 4}},
		{`[["d", "<", 1.2]]`, []int64{3, 4}},
		{`[["d", "==", {"decimal": "2.250"}]]`, []int64{2}},
		{`[["d", "==", {"decimal": "2.251"}]]`, []int64{}},
		{`[["day", "==", {"date": "2020-01-01"}]]`, []int64{0, 3}},
		{`[["day", ">", {"timestamp": "2020-01-01T12:00:00"}]]`, []int64{1}},
		{`[["u", ">", -1]]`, []int64{0, 1, 2, 3, 4}},
		{`[["u", "==", 18446744073709551615]]`, []int64{0}},
		{`[["u", ">=", 9223372036854775808]]`, []int64{0, 3}},
		{`[{"column": "i", "op": ">", "value": 1}, ["s", "==", "x"]]`, []int64{3}},
		{`[[["i", "==", 1]], [["s", "==", "zz"]]]`, []int64{0, 4}},
		{`[[["i", "==", 1], ["f", "==", 1]], [["b", "==", false]]]`, []int64{0, 1, 4}},
	} {
		if got := kept(t, rec, tc.filters); !slices.Equal(got, tc.want) {
			t.Errorf("filters %s kept rows %v, want %v", tc.filters, got, tc.want)
		}
	}
}

func TestParseAndBindErrors(t *testing.T) {
	rec := testRecord(t)
	defer rec.Release()
	for _, tc := range []struct {
		filters string
		want    string // a part of the error
	}{
		{`[]`, "empty list"},
		{`{"a": 1}`, "JSON list"},
		{`[["i", "~", 1]]`, `op "~" is unknown`},
		{`[["i", "in", 1]]`, "wants a list"},
		{`[["i", ">"]]`, "want [column, op, value]"},
		{`[{"column": "i", "op": ">"}]`, `"value"`},
		{`[{"column": "i", "op": ">", "value": 1, "x": 2}]`, "unknown field"},
		{`[["i", ">", {"decimal": "abc"}]]`, "not a decimal"},
		{`[["i", ">", {"timestamp": "yesterday"}]]`, "ISO 8601"},
		{`[["i", ">", {"what": "1"}]]`, `unknown typed form "what"`},
		{`[[]]`, "non-empty list"},
		{`[["nope", "==", 1]]`, `column "nope" not found`},
		{`[["i", "==", "1"]]`, `column "i" (int64): value "1" is a string, want an int or a float`},
		{`[["s", "==", 1]]`, `want a string`},
		{`[["b", "==", 1]]`, `want a bool`},
		{`[["ts", ">", 1]]`, `want a date or a naive timestamp`},
		{`[["ts", ">", {"timestamp": "2020-01-01T00:00:00Z"}]]`, `naive timestamp`},
		{`[["tz", ">", {"timestamp": "2020-01-01T00:00:00"}]]`, `with an offset`},
		{`[["d", ">", "1.5"]]`, `want an int, a float or a decimal`},
		{`[["f", "in", [1, "x"]]]`, `want an int or a float`},
	} {
		p, err := Parse([]byte(tc.filters))
		if err == nil {
			_, err = Bind(p, rec.Schema())
		}
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("filters %s: error %v, want ErrInvalid containing %q", tc.filters, err, tc.want)
		}
	}
	p, _ := Parse([]byte(`[["nope", "==", 1], ["i", "==", "x"]]`))
	if _, err := Bind(p, rec.Schema()); err == nil || !strings.Contains(err.Error(), "2 problems") {
		t.Errorf("Bind with two bad terms = %v, want both reported", err)
	}
}

func TestCanonical(t *testing.T) {
	a, _ := Parse([]byte(`[["i", "=", 1], ["f", "in", [1.0, {"float": "nan"}]]]`))
	b, _ := Parse([]byte(`[[{"column": "i", "op": "==", "value": 1}, {"column": "f", "op": "in", "value": [1.0, {"float":"NaN"}]}]]`))
	if a.Canonical() != b.Canonical() {
		t.Errorf("Canonical differs for the same filter: %s vs %s", a.Canonical(), b.Canonical())
	}
	c, err := Parse([]byte(a.Canonical()))
	if err != nil || c.Canonical() != a.Canonical() {
		t.Errorf("Canonical does not round-trip: %s -> %v, %v", a.Canonical(), c, err)
	}
	if !slices.Equal(a.Columns(), []string{"i", "f"}) {
		t.Errorf("Columns() = %v, want [i f]", a.Columns())
	}
}

func TestSelection(t *testing.T) {
	s, err := NewSelection(20, []Run{{2, 5}, {8, 9}, {12, 20}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Count() != 12 || s.All() {
		t.Fatalf("Count() = %d, All() = %v, want 12, false", s.Count(), s.All())
	}
	for _, tc := range []struct{ lo, hi, plo, phi int64 }{
		{0, 12, 2, 20}, {0, 3, 2, 5}, {2, 4, 4, 9}, {3, 4, 8, 9}, {4, 12, 12, 20}, {5, 6, 13, 14},
	} {
		if plo, phi := s.Physical(tc.lo, tc.hi); plo != tc.plo || phi != tc.phi {
			t.Errorf("Physical(%d, %d) = [%d, %d), want [%d, %d)", tc.lo, tc.hi, plo, phi, tc.plo, tc.phi)
		}
	}
	if got, want := s.Slice(2, 5, 4), []Run{{0, 1}, {4, 5}, {8, 9}}; !slices.Equal(got, want) {
		t.Errorf("Slice(2, 5, 4) = %v, want %v", got, want)
	}
	if _, err := NewSelection(10, []Run{{3, 5}, {4, 6}}); err == nil {
		t.Errorf("NewSelection of overlapping runs: no error")
	}
	if a := AllRows(7); !a.All() || a.Count() != 7 {
		t.Errorf("AllRows(7): All() %v Count() %d", a.All(), a.Count())
	}
}

func TestMemoryStoreEvicts(t *testing.T) {
	fs := &FileSelection{RowGroups: []*Selection{AllRows(10)}}
	m := NewMemoryStore(3 * (fs.Bytes() + 10))
	for i := range 5 {
		m.Put(fmt.Sprintf("f%d", i), "p", fs)
	}
	if m.Len() != 3 {
		t.Errorf("Len() = %d after 5 puts into room for 3, want 3", m.Len())
	}
	if _, ok := m.Get("f0", "p"); ok {
		t.Errorf("the least recently used entry was kept")
	}
	if got, ok := m.Get("f4", "p"); !ok || got != fs {
		t.Errorf("Get(f4) = %v, %v, want the selection put", got, ok)
	}
}

// TestPruneAgreesWithEval holds Prune to Eval on random int, float and
// string columns: a None verdict keeps no row, an All verdict keeps every
// row, with bounds and null counts from the data.
func TestPruneAgreesWithEval(t *testing.T) {
	seed := testseed.Get(t, *seedFlag, "filter.seed")
	rng := rand.New(rand.NewPCG(seed, 0))
	mem := memory.NewGoAllocator()
	ops := []string{"==", "!=", "<", "<=", ">", ">=", "in", "not in"}
	checked := map[Verdict]int{}
	for iter := range 3000 {
		n := 1 + rng.IntN(6)
		kind := rng.IntN(3)
		var arr, mm arrow.Array
		var val func() string
		switch kind {
		case 0:
			b := array.NewInt64Builder(mem)
			lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
			for range n {
				if rng.IntN(4) == 0 {
					b.AppendNull()
					continue
				}
				v := int64(rng.IntN(7))
				lo, hi = min(lo, v), max(hi, v)
				b.Append(v)
			}
			arr = b.NewArray()
			if lo <= hi {
				b.AppendValues([]int64{lo, hi}, nil)
				mm = b.NewArray()
			}
			val = func() string {
				if rng.IntN(10) == 0 {
					return "null"
				}
				if rng.IntN(3) == 0 {
					return fmt.Sprintf("%.1f", float64(rng.IntN(14))/2)
				}
				return fmt.Sprint(rng.IntN(8) - 1)
			}
		case 1:
			b := array.NewFloat64Builder(mem)
			lo, hi := math.Inf(1), math.Inf(-1)
			for range n {
				switch rng.IntN(5) {
				case 0:
					b.AppendNull()
				case 1:
					b.Append(math.NaN())
				default:
					v := float64(rng.IntN(7)) / 2
					lo, hi = min(lo, v), max(hi, v)
					b.Append(v)
				}
			}
			arr = b.NewArray()
			if lo <= hi {
				b.AppendValues([]float64{lo, hi}, nil)
				mm = b.NewArray()
			}
			val = func() string {
				if rng.IntN(8) == 0 {
					return `{"float": "nan"}`
				}
				return fmt.Sprintf("%.1f", float64(rng.IntN(8))/2)
			}
		default:
			b := array.NewStringBuilder(mem)
			words := []string{"a", "b", "bb", "c"}
			lo, hi, any := "", "", false
			for range n {
				if rng.IntN(4) == 0 {
					b.AppendNull()
					continue
				}
				v := words[rng.IntN(len(words))]
				if !any || v < lo {
					lo = v
				}
				if !any || v > hi {
					hi = v
				}
				any = true
				b.Append(v)
			}
			arr = b.NewArray()
			if any {
				b.AppendValues([]string{lo, hi}, nil)
				mm = b.NewArray()
			}
			val = func() string { return fmt.Sprintf("%q", []string{"a", "b", "ba", "bb", "c", "d"}[rng.IntN(6)]) }
		}
		op := ops[rng.IntN(len(ops))]
		v := val()
		if op == "in" || op == "not in" {
			items := []string{}
			for range rng.IntN(4) {
				items = append(items, val())
			}
			if rng.IntN(4) == 0 {
				items = append(items, "null")
			}
			v = "[" + strings.Join(items, ",") + "]"
		}
		js := fmt.Sprintf(`[["c", %q, %s]]`, op, v)
		schema := arrow.NewSchema([]arrow.Field{{Name: "c", Type: arr.DataType(), Nullable: true}}, nil)
		rec := array.NewRecordBatch(schema, []arrow.Array{arr}, int64(n))
		p, err := Parse([]byte(js))
		if err != nil {
			t.Fatalf("iteration %d: Parse(%s) = %v", iter, js, err)
		}
		bd, err := Bind(p, schema)
		if err != nil {
			t.Fatalf("iteration %d: Bind(%s) = %v", iter, js, err)
		}
		sel, err := bd.Eval(rec)
		if err != nil {
			t.Fatal(err)
		}
		nulls := int64(arr.NullN())
		knownNulls := rng.IntN(4) != 0
		st := ColumnStats{Rows: int64(n), Nulls: nulls, NullsKnown: knownNulls}
		if rng.IntN(5) != 0 {
			st.MinMax = mm
		}
		if rng.IntN(2) == 0 { // a dictionary: the values, and maybe one no row has
			db := array.NewBuilder(mem, arr.DataType())
			for i := range n {
				if arr.IsValid(i) {
					if err := db.AppendValueFromString(arr.ValueStr(i)); err != nil {
						t.Fatal(err)
					}
				}
			}
			if rng.IntN(2) == 0 {
				_ = db.AppendValueFromString(map[int]string{0: "3", 1: "2.5", 2: "bb"}[kind])
			}
			st.Dict = db.NewArray()
			db.Release()
			defer st.Dict.Release()
		}
		if rng.IntN(3) == 0 { // a bloom filter: the values, and false positives
			held := map[any]bool{}
			for i := range n {
				if arr.IsNull(i) {
					continue
				}
				switch a := arr.(type) {
				case *array.Int64:
					held[a.Value(i)] = true
				case *array.Float64:
					held[a.Value(i)] = true
				case *array.String:
					held[a.Value(i)] = true
				}
			}
			st.Bloom = fakeBloom{held: held, fp: rng.IntN(3) == 0}
		}
		verdict := bd.Prune(func(string) ColumnStats { return st })
		checked[verdict]++
		switch {
		case verdict == None && sel.Count() != 0:
			t.Errorf("iteration %d: %s on %v (stats %v nulls %d known %v): Prune says None, Eval keeps %d rows", iter, js, arr, mm, nulls, knownNulls, sel.Count())
		case verdict == All && !sel.All():
			t.Errorf("iteration %d: %s on %v (stats %v nulls %d known %v): Prune says All, Eval keeps %d of %d rows", iter, js, arr, mm, nulls, knownNulls, sel.Count(), n)
		}
		rec.Release()
		arr.Release()
		if mm != nil {
			mm.Release()
		}
	}
	if checked[None] == 0 || checked[All] == 0 || checked[Some] == 0 {
		t.Errorf("verdicts seen %v: want each of None, All, Some", checked)
	}
}

// fakeBloom holds the values given, and says it may hold any other when fp.
type fakeBloom struct {
	held map[any]bool
	fp   bool
}

func (b fakeBloom) MayContain(v any) bool { return b.fp || b.held[v] }
