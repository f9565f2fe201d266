package datagen

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
)

func TestParseFormat(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Format
		wantErr bool
	}{
		{"parquet", FormatParquet, false},
		{"arrow", FormatArrow, false},
		{"feather", 0, true},
		{"Parquet", 0, true},
		{"", 0, true},
	} {
		got, err := ParseFormat(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseFormat(%q) = %v, %v, want %v, err %v", tc.in, got, err, tc.want, tc.wantErr)
		}
		if err != nil && (!errors.Is(err, ErrUnknownValue) || !strings.Contains(err.Error(), "parquet, arrow")) {
			t.Errorf("ParseFormat(%q) error %q does not wrap ErrUnknownValue and list the valid values", tc.in, err)
		}
		if err == nil && got.String() != tc.in {
			t.Errorf("ParseFormat(%q).String() = %q", tc.in, got.String())
		}
	}
}

func TestParseCompression(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Compression
		wantErr bool
	}{
		{"none", CompressionNone, false},
		{"snappy", CompressionSnappy, false},
		{"zstd", CompressionZstd, false},
		{"gzip", CompressionGzip, false},
		{"lz4", CompressionLZ4, false},
		{"lz4_raw", 0, true},
		{"brotli", 0, true},
		{"", 0, true},
	} {
		got, err := ParseCompression(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseCompression(%q) = %v, %v, want %v, err %v", tc.in, got, err, tc.want, tc.wantErr)
		}
		if err != nil && (!errors.Is(err, ErrUnknownValue) || !strings.Contains(err.Error(), "none, snappy, zstd, gzip, lz4")) {
			t.Errorf("ParseCompression(%q) error %q does not wrap ErrUnknownValue and list the valid values", tc.in, err)
		}
	}
}

func TestSpecJSONRoundTrip(t *testing.T) {
	s := DefaultSpec()
	s.Tokens, s.TokensMin, s.TokensMax = true, 1, 9
	s.Image = [3]int{4, 5, 3}
	s.Format, s.Compression, s.Seed = FormatArrow, CompressionZstd, 1<<63+5
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"format":"arrow"`) || !strings.Contains(string(b), `"compression":"zstd"`) {
		t.Errorf("json.Marshal(spec) = %s, want format and compression by name", b)
	}
	var back Spec
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back != s {
		t.Errorf("round trip = %+v, want %+v", back, s)
	}
	if err := json.Unmarshal([]byte(`{"compression":"brotli"}`), &back); !errors.Is(err, ErrUnknownValue) {
		t.Errorf("json.Unmarshal(compression brotli) = %v, want ErrUnknownValue", err)
	}
}

func TestCanonical(t *testing.T) {
	a, b := DefaultSpec(), DefaultSpec()
	a.TokensMin, a.TokensMax = 3, 4 // ignored without Tokens
	if a == b || a.Canonical() != b.Canonical() {
		t.Errorf("Canonical does not ignore token lengths without tokens: %+v vs %+v", a.Canonical(), b.Canonical())
	}
	a.Tokens, b.Tokens = true, true
	if a.Canonical() == b.Canonical() {
		t.Errorf("Canonical ignores token lengths with tokens")
	}
}

func TestValidate(t *testing.T) {
	mod := func(f func(*Spec)) Spec { s := DefaultSpec(); f(&s); return s }
	for _, tc := range []struct {
		name string
		s    Spec
		want []string // substrings of the error; nil = valid
	}{
		{"default", DefaultSpec(), nil},
		{"tokens", mod(func(s *Spec) { s.Tokens, s.TokensMin, s.TokensMax = true, 0, 0 }), nil},
		{"image", mod(func(s *Spec) { s.Image = [3]int{1, 1, 1} }), nil},
		{"no features", mod(func(s *Spec) { s.Features = 0 }), nil},
		{"arrow lz4", mod(func(s *Spec) { s.Format, s.Compression = FormatArrow, CompressionLZ4 }), nil},
		{"rows = files", mod(func(s *Spec) { s.Rows, s.Files = 3, 3 }), nil},
		{"zero files", mod(func(s *Spec) { s.Files = 0 }), []string{"files = 0"}},
		{"too many files", mod(func(s *Spec) { s.Files, s.Rows = MaxFiles+1, 1e9 }), []string{"files = 100001"}},
		{"rows < files", mod(func(s *Spec) { s.Rows, s.Files = 2, 3 }), []string{"rows = 2"}},
		{"zero rows", mod(func(s *Spec) { s.Rows = 0 }), []string{"rows = 0"}},
		{"zero row group", mod(func(s *Spec) { s.RowGroupRows = 0 }), []string{"row group rows = 0"}},
		{"negative features", mod(func(s *Spec) { s.Features = -1 }), []string{"features = -1"}},
		{"tokens max < min", mod(func(s *Spec) { s.Tokens, s.TokensMin, s.TokensMax = true, 5, 4 }), []string{"tokens = 5:4"}},
		{"negative tokens", mod(func(s *Spec) { s.Tokens, s.TokensMin = true, -1 }), []string{"tokens = -1:0"}},
		{"image zero dim", mod(func(s *Spec) { s.Image = [3]int{2, 0, 3} }), []string{"image shape [2 0 3]"}},
		{"image too big", mod(func(s *Spec) { s.Image = [3]int{4096, 4096, 3} }), []string{"image shape"}},
		{"arrow snappy", mod(func(s *Spec) { s.Format, s.Compression = FormatArrow, CompressionSnappy }), []string{"snappy is not supported by Arrow IPC"}},
		{"arrow gzip", mod(func(s *Spec) { s.Format, s.Compression = FormatArrow, CompressionGzip }), []string{"gzip is not supported"}},
		{"arrow dictionary", mod(func(s *Spec) { s.Format, s.Dictionary = FormatArrow, true }), []string{"dictionary"}},
		{"bad format", mod(func(s *Spec) { s.Format = 7 }), []string{"format Format(7)"}},
		{"bad compression", mod(func(s *Spec) { s.Compression = 9 }), []string{"compression Compression(9)"}},
		{"every problem at once", mod(func(s *Spec) { s.Files, s.RowGroupRows, s.Features = 0, -1, -2 }),
			[]string{"files = 0", "row group rows = -1", "features = -2"}},
	} {
		err := tc.s.Validate()
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s: Validate() = %v, want nil", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidSpec", tc.name, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: Validate() = %q, want it to mention %q", tc.name, err, w)
			}
		}
	}
}

func TestPlan(t *testing.T) {
	s := DefaultSpec()
	s.Rows, s.Files, s.RowGroupRows = 11, 3, 2
	got, err := s.Plan()
	if err != nil {
		t.Fatal(err)
	}
	// 11 rows over 3 files: 4, 4, 3; row groups of 2.
	want := []FilePlan{
		{Name: "part-00000.parquet", FirstRow: 0, Rows: 4, RowGroups: []int64{2, 2}},
		{Name: "part-00001.parquet", FirstRow: 4, Rows: 4, RowGroups: []int64{2, 2}},
		{Name: "part-00002.parquet", FirstRow: 8, Rows: 3, RowGroups: []int64{2, 1}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Plan() = %+v, want %+v", got, want)
	}
	s.Format, s.Rows, s.Files, s.RowGroupRows = FormatArrow, 5, 1, 10
	got, _ = s.Plan()
	if len(got) != 1 || got[0].Name != "part-00000.arrow" || !reflect.DeepEqual(got[0].RowGroups, []int64{5}) {
		t.Errorf("Plan() = %+v, want one part-00000.arrow with one 5-row batch", got)
	}
	s.Files = 0
	if _, err := s.Plan(); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("Plan() of an invalid spec = %v, want ErrInvalidSpec", err)
	}
}

// Sorted names are in row order even past 10 files, and rows add up.
func TestPlanManyFiles(t *testing.T) {
	s := DefaultSpec()
	s.Rows, s.Files, s.RowGroupRows = 1234567, 123, 1000
	plan, err := s.Plan()
	if err != nil {
		t.Fatal(err)
	}
	next := int64(0)
	for i, fp := range plan {
		if i > 0 && fp.Name <= plan[i-1].Name {
			t.Errorf("file %d name %q sorts before %q", i, fp.Name, plan[i-1].Name)
		}
		if fp.FirstRow != next {
			t.Errorf("file %d FirstRow = %d, want %d", i, fp.FirstRow, next)
		}
		if fp.Rows != 10037 && fp.Rows != 10038 { // 1234567 / 123 = 10037.1
			t.Errorf("file %d Rows = %d, want 10037 or 10038", i, fp.Rows)
		}
		var sum int64
		for _, g := range fp.RowGroups {
			sum += g
		}
		if sum != fp.Rows {
			t.Errorf("file %d row groups sum to %d, want %d", i, sum, fp.Rows)
		}
		next += fp.Rows
	}
	if next != s.Rows {
		t.Errorf("files hold %d rows, want %d", next, s.Rows)
	}
}

func TestSchema(t *testing.T) {
	s := DefaultSpec()
	s.Features = 8
	s.Tokens, s.TokensMax = true, 4
	s.Image = [3]int{2, 3, 4}
	sc, err := s.Schema()
	if err != nil {
		t.Fatal(err)
	}
	elem := func(t arrow.DataType) arrow.Field { return arrow.Field{Name: "element", Type: t} }
	want := []struct {
		name string
		typ  arrow.DataType
	}{
		{"id", arrow.PrimitiveTypes.Int64},
		{"label", arrow.PrimitiveTypes.Int32},
		{"features", arrow.FixedSizeListOfField(8, elem(arrow.PrimitiveTypes.Float32))},
		{"tokens", arrow.ListOfField(elem(arrow.PrimitiveTypes.Int32))},
	}
	if sc.NumFields() != 5 {
		t.Fatalf("Schema() has %d fields, want 5: %v", sc.NumFields(), sc)
	}
	for i, w := range want {
		f := sc.Field(i)
		if f.Name != w.name || !arrow.TypeEqual(f.Type, w.typ) || f.Nullable {
			t.Errorf("field %d = %v, want %s %v not null", i, f, w.name, w.typ)
		}
	}
	img, ok := sc.Field(4).Type.(*TensorType)
	if !ok || sc.Field(4).Name != "image" {
		t.Fatalf("field 4 = %v, want image *TensorType", sc.Field(4))
	}
	if !reflect.DeepEqual(img.Shape(), []int{2, 3, 4}) || img.Serialize() != `{"shape":[2,3,4]}` ||
		!arrow.TypeEqual(img.StorageType(), arrow.FixedSizeListOfField(24, arrow.Field{Name: "element", Type: arrow.PrimitiveTypes.Uint8, Nullable: true})) {
		t.Errorf("image type = %v (%s, storage %v), want shape [2 3 4] over fixed_size_list<uint8>[24]", img, img.Serialize(), img.StorageType())
	}
	s.Features, s.Tokens, s.Image = 0, false, [3]int{}
	sc, _ = s.Schema()
	if sc.NumFields() != 2 {
		t.Errorf("Schema() without features, tokens, image = %v, want id and label", sc)
	}
}

func TestTensorTypeDeserialize(t *testing.T) {
	st := arrow.FixedSizeListOf(6, arrow.PrimitiveTypes.Uint8)
	for _, tc := range []struct {
		storage arrow.DataType
		meta    string
		wantErr bool
	}{
		{st, `{"shape":[2,3]}`, false},
		{st, `{"shape":[2,3],"dim_names":["H","W"],"permutation":[0,1]}`, false},
		{st, `{"shape":[2,4]}`, true},
		{st, `{"shape":[]}`, true},
		{st, `{"shape":[-2,-3]}`, true},
		{st, `not json`, true},
		{arrow.ListOf(arrow.PrimitiveTypes.Uint8), `{"shape":[2,3]}`, true},
	} {
		_, err := (&TensorType{}).Deserialize(tc.storage, tc.meta)
		if (err != nil) != tc.wantErr {
			t.Errorf("Deserialize(%v, %q) = %v, want error %v", tc.storage, tc.meta, err, tc.wantErr)
		}
	}
}
