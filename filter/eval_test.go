package filter

import (
	"encoding/base64"
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

// refEval is a term evaluated row by row (getterOf and match, the meaning
// Prune and the typed loops of eval.go must agree with): a null row, or a
// row whose dictionary value is null, takes nullMatches.
func refEval[T comparable](m *ordMatcher[T], arr arrow.Array, out []bool) error {
	g, err := getterOf(arr, m.get)
	if err != nil {
		return err
	}
	d, _ := arr.(*array.Dictionary)
	for i := range out {
		switch {
		case arr.IsNull(i), d != nil && d.Dictionary().IsNull(d.GetValueIndex(i)):
			out[i] = m.nullMatches()
		default:
			out[i] = m.match(g(i))
		}
	}
	return nil
}

func refEvalOf(m matcher, arr arrow.Array, out []bool) error {
	switch mm := m.(type) {
	case *ordMatcher[int64]:
		return refEval(mm, arr, out)
	case *ordMatcher[uint64]:
		return refEval(mm, arr, out)
	case *ordMatcher[float64]:
		return refEval(mm, arr, out)
	case *ordMatcher[string]:
		return refEval(mm, arr, out)
	case *ordMatcher[decimal128.Num]:
		return refEval(mm, arr, out)
	}
	return fmt.Errorf("matcher %T", m)
}

var strPool = []string{"", "a", "ab", "b", "ba", "x", "zz"}

// evalCase is a column type, how to build a value of it from v in [-3, 3],
// and the filter values (JSON) its terms compare with.
type evalCase struct {
	dt     arrow.DataType
	values []string
}

func evalCases() []evalCase {
	ints := []string{"-4", "-3", "-1", "0", "1", "2", "3", "4", "1.5", "-0.5", "null", `{"float": "inf"}`, `{"float": "-inf"}`, `{"float": "nan"}`, "300", "-200"}
	floats := []string{"-1", "0", "1", "0.5", "-1.5", "null", `{"float": "nan"}`, `{"float": "inf"}`}
	strs := []string{`""`, `"a"`, `"ab"`, `"b"`, `"bb"`, `"zz"`, "null"}
	bins := append([]string{`{"bytes": "` + base64.StdEncoding.EncodeToString([]byte("ab")) + `"}`, `{"bytes": ""}`}, strs...)
	ts := []string{`{"timestamp": "1970-01-01T00:00:00.000001"}`, `{"timestamp": "1969-12-31T23:59:59.999998"}`, `{"timestamp": "1970-01-01T00:00:00.0000015"}`, `{"date": "1970-01-01"}`, "null"}
	tsz := []string{`{"timestamp": "1970-01-01T00:00:00.001Z"}`, `{"timestamp": "1970-01-01T01:00:00.002+01:00"}`, `{"timestamp": "1970-01-01T00:00:00.0015Z"}`, "null"}
	dates := []string{`{"date": "1970-01-02"}`, `{"date": "1969-12-30"}`, `{"date": "1970-01-01"}`, `{"timestamp": "1970-01-01T12:00:00"}`, "null"}
	decs := []string{"1", "0", `{"decimal": "0.5"}`, `{"decimal": "-1.005"}`, "0.25", `{"decimal": "1.50"}`, "null"}
	dict := func(idx, v arrow.DataType) arrow.DataType { return &arrow.DictionaryType{IndexType: idx, ValueType: v} }
	return []evalCase{
		{arrow.PrimitiveTypes.Int8, ints}, {arrow.PrimitiveTypes.Int16, ints}, {arrow.PrimitiveTypes.Int32, ints}, {arrow.PrimitiveTypes.Int64, ints},
		{arrow.PrimitiveTypes.Uint8, ints}, {arrow.PrimitiveTypes.Uint16, ints}, {arrow.PrimitiveTypes.Uint32, ints}, {arrow.PrimitiveTypes.Uint64, ints},
		{arrow.PrimitiveTypes.Float32, floats}, {arrow.PrimitiveTypes.Float64, floats},
		{arrow.FixedWidthTypes.Boolean, []string{"true", "false", "null"}},
		{arrow.BinaryTypes.String, strs}, {arrow.BinaryTypes.LargeString, strs},
		{arrow.BinaryTypes.Binary, bins}, {arrow.BinaryTypes.LargeBinary, bins}, {&arrow.FixedSizeBinaryType{ByteWidth: 2}, bins},
		{&arrow.TimestampType{Unit: arrow.Microsecond}, ts}, {&arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"}, tsz},
		{arrow.FixedWidthTypes.Date32, dates}, {arrow.FixedWidthTypes.Date64, dates},
		{&arrow.Decimal128Type{Precision: 10, Scale: 2}, decs},
		{dict(arrow.PrimitiveTypes.Int32, arrow.BinaryTypes.String), strs},
		{dict(arrow.PrimitiveTypes.Int8, arrow.BinaryTypes.String), strs},
		{dict(arrow.PrimitiveTypes.Uint16, arrow.PrimitiveTypes.Int64), ints},
		{dict(arrow.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Float64), floats},
	}
}

// appendValue appends the value of type dt made from v in [-3, 3] (NaN for
// a float when nan).
func appendValue(b array.Builder, v int64, nan bool) {
	switch b := b.(type) {
	case *array.Int8Builder:
		b.Append(int8(v))
	case *array.Int16Builder:
		b.Append(int16(v))
	case *array.Int32Builder:
		b.Append(int32(v))
	case *array.Int64Builder:
		b.Append(v)
	case *array.Uint8Builder:
		b.Append(uint8(v + 3))
	case *array.Uint16Builder:
		b.Append(uint16(v + 3))
	case *array.Uint32Builder:
		b.Append(uint32(v + 3))
	case *array.Uint64Builder:
		b.Append(uint64(v+3) << 61 >> 61)
	case *array.Float32Builder:
		b.Append(float32(v) / 2)
		if nan {
			b.Append(float32(math.NaN()))
		}
	case *array.Float64Builder:
		b.Append(float64(v) / 2)
		if nan {
			b.Append(math.NaN())
		}
	case *array.BooleanBuilder:
		b.Append(v > 0)
	case *array.StringBuilder:
		b.Append(strPool[v+3])
	case *array.LargeStringBuilder:
		b.Append(strPool[v+3])
	case *array.BinaryBuilder:
		b.Append([]byte(strPool[v+3]))
	case *array.FixedSizeBinaryBuilder:
		b.Append([]byte((strPool[v+3] + "__")[:2]))
	case *array.TimestampBuilder:
		b.Append(arrow.Timestamp(v))
	case *array.Date32Builder:
		b.Append(arrow.Date32(v))
	case *array.Date64Builder:
		b.Append(arrow.Date64(v * 43_200_000))
	case *array.Decimal128Builder:
		b.Append(decimal128.FromI64(v * 50))
	default:
		panic(fmt.Sprintf("no value for %T", b))
	}
}

// randomArray returns n values of type dt (nulls, NaN, a dictionary with a
// null value among them), sliced at a random offset.
func randomArray(rng *rand.Rand, mem memory.Allocator, dt arrow.DataType, n int) arrow.Array {
	if d, ok := dt.(*arrow.DictionaryType); ok {
		dict := randomArray(rng, mem, d.ValueType, 1+rng.IntN(7))
		defer dict.Release()
		ib := array.NewBuilder(mem, d.IndexType)
		defer ib.Release()
		for range n {
			if rng.IntN(5) == 0 {
				ib.AppendNull()
			} else {
				appendIndex(ib, rng.IntN(dict.Len()))
			}
		}
		idx := ib.NewArray()
		defer idx.Release()
		return array.NewDictionaryArray(d, idx, dict)
	}
	b := array.NewBuilder(mem, dt)
	defer b.Release()
	skip := rng.IntN(3)
	for b.Len() < n+skip {
		if rng.IntN(5) == 0 {
			b.AppendNull()
			continue
		}
		appendValue(b, int64(rng.IntN(7)-3), rng.IntN(6) == 0 && b.Len() < n+skip-1)
	}
	whole := b.NewArray()
	defer whole.Release()
	return array.NewSlice(whole, int64(skip), int64(skip+n))
}

func appendIndex(b array.Builder, i int) {
	switch b := b.(type) {
	case *array.Int8Builder:
		b.Append(int8(i))
	case *array.Int32Builder:
		b.Append(int32(i))
	case *array.Int64Builder:
		b.Append(int64(i))
	case *array.Uint16Builder:
		b.Append(uint16(i))
	}
}

// randomTerm returns a term's JSON on column c with values from pool.
func randomTerm(rng *rand.Rand, pool []string) string {
	ops := []string{"==", "!=", "<", "<=", ">", ">=", "in", "not in"}
	op := ops[rng.IntN(len(ops))]
	if op == "in" || op == "not in" {
		var set []string
		for range rng.IntN(4) {
			set = append(set, pool[rng.IntN(len(pool))])
		}
		return fmt.Sprintf(`[["c", %q, [%s]]]`, op, strings.Join(set, ", "))
	}
	return fmt.Sprintf(`[["c", %q, %s]]`, op, pool[rng.IntN(len(pool))])
}

// TestEvalMatchesRowByRow holds Eval's typed loops to the row-by-row meaning
// (match, which Prune shares) on random arrays of every column type the
// filter reads: nulls, NaN, sliced arrays, dictionaries (with a null value)
// of several index types, every op, values in and out of the column's
// range.
func TestEvalMatchesRowByRow(t *testing.T) {
	seed := testseed.Get(t, *seedFlag, "filter.seed")
	rng := rand.New(rand.NewPCG(seed, 1))
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	checked := 0
	for iter := range 4000 {
		c := evalCases()[rng.IntN(len(evalCases()))]
		arr := randomArray(rng, mem, c.dt, rng.IntN(40))
		schema := arrow.NewSchema([]arrow.Field{{Name: "c", Type: c.dt, Nullable: true}}, nil)
		js := randomTerm(rng, c.values)
		p, err := Parse([]byte(js))
		if err != nil {
			t.Fatalf("iteration %d: Parse(%s) = %v", iter, js, err)
		}
		b, err := Bind(p, schema)
		if err != nil {
			arr.Release()
			continue // a value the column's type does not take
		}
		rec := array.NewRecordBatch(schema, []arrow.Array{arr}, int64(arr.Len()))
		sel, err := b.Eval(rec)
		if err != nil {
			t.Fatalf("iteration %d: %s on %s: Eval = %v", iter, js, c.dt, err)
		}
		want := make([]bool, arr.Len())
		if err := refEvalOf(b.any[0][0], arr, want); err != nil {
			t.Fatalf("iteration %d: %s on %s: reference = %v", iter, js, c.dt, err)
		}
		if got, w := sel.Runs(), fromMask(want).Runs(); !slices.Equal(got, w) {
			t.Errorf("iteration %d: %s on %s %v: Eval kept %v, row by row %v", iter, js, c.dt, arr, got, w)
		}
		rec.Release()
		arr.Release()
		checked++
	}
	if checked < 2000 {
		t.Errorf("only %d of 4000 random terms bound: the value pools do not fit their types", checked)
	}
}
