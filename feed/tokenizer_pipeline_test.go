package feed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/tokenize"
	"github.com/meshfeed/meshfeed/transport"
)

// textSpec is the text dataset of the tokenizer tests: 120 documents of 1
// to 400 characters in 2 files of 13-row row groups (the last of each file
// shorter).
func textSpec() datagen.TextSpec {
	return datagen.TextSpec{Docs: 120, Files: 2, RowGroupRows: 13, MinChars: 1, MaxChars: 400, Seed: 3}
}

func textSource() *datagen.TextSource {
	var sb strings.Builder
	for i := 0; sb.Len() < 1<<17; i++ {
		fmt.Fprintf(&sb, "def f%d(x):\n    \"\"\"Return the other x, in the %d-th way.\"\"\"\n    return x + %d\n\nThe theory of the atom is in the thesis. ", i, i, i)
	}
	return datagen.NewTextSource(sb.String())
}

// writeTextDataset writes textSpec under a new directory, with the
// tokenizer files beside it, and returns the directory.
func writeTextDataset(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := datagen.WriteText(context.Background(), datagen.LocalCreator{}, dir, textSpec(), textSource()); err != nil {
		t.Fatal(err)
	}
	writeTokenizer(t, dir, 0)
	writeTokenizer(t, dir, 1)
	return dir
}

// allSlices reads every step of req from p (Open, Next until EOF) and
// returns the slices' records, which the caller releases (releaseAll).
func allSlices(t *testing.T, p *Pipeline, req *transport.Request) []arrow.RecordBatch {
	t.Helper()
	st, err := p.Open(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var out []arrow.RecordBatch
	for {
		step, err := st.Next(context.Background())
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			releaseAll(out)
			t.Fatal(err)
		}
		out = append(out, step.Slices...)
	}
}

func releaseAll(recs []arrow.RecordBatch) {
	for _, r := range recs {
		r.Release()
	}
}

// fixedRows returns the rows of a fixed_size_list<int32> column.
func fixedRows(a arrow.Array) [][]int32 {
	l := a.(*array.FixedSizeList)
	n := l.DataType().(*arrow.FixedSizeListType).Len()
	v := l.ListValues().(*array.Int32).Int32Values()[l.Offset()*int(n):]
	var out [][]int32
	for i := range l.Len() {
		out = append(out, v[i*int(n):(i+1)*int(n)])
	}
	return out
}

// TestTokenizedColumnMatchesEncode: the server against the model: every
// delivered row's ids are tokenize.Encode of the document its id names,
// then shaped as the column asks (truncated, padded with the fill, its
// length column), with and without special tokens, shuffled, filtered, read
// whole and in pieces, each document once per epoch.
func TestTokenizedColumnMatchesEncode(t *testing.T) {
	dir := writeTextDataset(t)
	tk, err := tokenize.Parse("t", testTokenizerJSON(0))
	if err != nil {
		t.Fatal(err)
	}
	spec, src := textSpec(), textSource()
	no := false
	const L = 48
	cases := []struct {
		name      string
		readAhead int64
		col       transport.Column
		filters   string
		window    int
	}{
		{"truncate", 0, transport.Column{Name: "text", Length: L, Overflow: "truncate", Fill: json.RawMessage("-1")}, "", 0},
		{"no specials, shuffled", 0, transport.Column{Name: "text", Length: L, Overflow: "truncate", AddSpecialTokens: &no}, "", 16},
		{"pieces, filtered", 12 << 10, transport.Column{Name: "text", Length: L, Overflow: "truncate"}, `[["id", "<", 70], ["id", "!=", 5]]`, 0},
		{"unshaped", 1 << 20, transport.Column{Name: "text"}, `[["id", ">=", 30]]`, 8},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			p, err := NewPipeline(context.Background(), WithAllocator(mem), WithReadAhead(c.readAhead), WithCacheTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			col := c.col
			col.Tokenizer = filepath.Join(dir, "tokenizer.json")
			req := &transport.Request{Version: transport.Version, Datasets: []string{dir + "/*.parquet"}, GlobalBatchSize: 8, NumSlices: 2,
				Slices: []int{0, 1}, LastBatch: transport.LastBatchDrop, Epochs: 1, Seed: 4,
				Columns: []transport.Column{{Name: "id"}, col}}
			if c.window > 0 {
				req.Shuffle = transport.Shuffle{Enabled: true, Window: c.window}
			}
			if c.filters != "" {
				req.Filters = json.RawMessage(c.filters)
			}
			info, err := p.Info(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if info.Tokenizers["text"] != tk.Hash() || len(info.Tokenizers) != 1 {
				t.Errorf("Info tokenizers = %v, want text: %s", info.Tokenizers, tk.Hash())
			}
			seen := map[int64]int{}
			recs := allSlices(t, p, req)
			defer releaseAll(recs)
			for _, rec := range recs {
				ids := rec.Column(0).(*array.Int64).Int64Values()
				for i, id := range ids {
					seen[id]++
					want, _ := tk.Encode(src.TextDoc(spec, id), col.AddSpecial())
					if col.Length == 0 {
						l := rec.Column(1).(*array.List)
						lo, hi := l.ValueOffsets(i)
						got := l.ListValues().(*array.Int32).Int32Values()[lo:hi]
						if !slices.Equal(got, want) {
							t.Fatalf("id %d: ids %v, want %v", id, got, want)
						}
						continue
					}
					got := fixedRows(rec.Column(1))[i]
					n := min(len(want), L)
					fill := int32(0)
					if len(col.Fill) > 0 {
						fill = -1
					}
					padded := append(slices.Clone(want[:n]), slices.Repeat([]int32{fill}, L-n)...)
					length := rec.Column(2).(*array.Int32).Value(i)
					if !slices.Equal(got, padded) || int(length) != n {
						t.Fatalf("id %d: ids %v length %d, want %v length %d", id, got, length, padded, n)
					}
				}
			}
			for id := range int64(spec.Docs) {
				kept := c.filters == "" || (strings.Contains(c.filters, "70") && id < 70 && id != 5) || (strings.Contains(c.filters, ">=") && id >= 30)
				if k := seen[id]; kept && k > 1 || !kept && k > 0 {
					t.Errorf("id %d delivered %d times (kept by the filter: %v)", id, k, kept)
				}
			}
			if len(seen) < 30 {
				t.Errorf("only %d documents delivered", len(seen))
			}
		})
	}
}

// TestTokenizedColumnPacked: packed rows of a tokenized column hold, over an
// epoch, exactly each document's ids (truncated to the length) once, each
// segment's positions counting from 0.
func TestTokenizedColumnPacked(t *testing.T) {
	dir := writeTextDataset(t)
	tk, err := tokenize.Parse("t", testTokenizerJSON(0))
	if err != nil {
		t.Fatal(err)
	}
	spec, src := textSpec(), textSource()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	p, err := NewPipeline(context.Background(), WithAllocator(mem))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const L = 256
	req := &transport.Request{Version: transport.Version, Datasets: []string{dir + "/*.parquet"}, GlobalBatchSize: 24, NumSlices: 2,
		Slices: []int{0, 1}, LastBatch: transport.LastBatchDrop, Epochs: 1,
		Columns: []transport.Column{{Name: "text", Tokenizer: filepath.Join(dir, "tokenizer.json"), Length: L, Overflow: "truncate", PackRatio: 2}}}
	var want, got []string
	for id := range spec.Docs {
		ids, _ := tk.Encode(src.TextDoc(spec, id), true)
		want = append(want, fmt.Sprint(ids[:min(len(ids), L)]))
	}
	recs := allSlices(t, p, req)
	defer releaseAll(recs)
	for _, rec := range recs {
		toks, segs, pos := fixedRows(rec.Column(0)), fixedRows(rec.Column(1)), fixedRows(rec.Column(2))
		for r := range toks {
			for j := 0; j < L; {
				if segs[r][j] == 0 {
					j++
					continue
				}
				k := j
				for k < L && segs[r][k] == segs[r][j] {
					if pos[r][k] != int32(k-j) {
						t.Fatalf("row %d position %d = %d, want %d", r, k, pos[r][k], k-j)
					}
					k++
				}
				got = append(got, fmt.Sprint(toks[r][j:k]))
				j = k
			}
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("packed segments (%d) are not the %d documents' ids", len(got), len(want))
	}
}

// TestTokenizerBadInput: each bad input is a clear error, at plan time where
// the information exists, naming the file, the column and what to do.
func TestTokenizerBadInput(t *testing.T) {
	dir := writeTextDataset(t)
	other := t.TempDir()
	outside := writeTokenizer(t, other, 0)
	bad := map[string]string{
		"malformed.json":   `{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a", "zz"]]}, "truncation": null, "padding": null}`,
		"unsupported.json": strings.Replace(string(testTokenizerJSON(0)), `"normalizer":null`, `"normalizer":{"type":"Precompiled","precompiled_charsmap":"AA"}`, 1),
		"notjson.json":     `{"model": `,
	}
	for name, text := range bad {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ts := startPipeline(t, checkedMem(t), []string{dir})
	req := func(col transport.Column) *transport.Request {
		return &transport.Request{Version: transport.Version, Datasets: []string{dir + "/*.parquet"}, GlobalBatchSize: 8, NumSlices: 2,
			Slices: []int{0}, LastBatch: transport.LastBatchDrop, Epochs: 1, Columns: []transport.Column{col}}
	}
	tokCol := func(name, file string) transport.Column {
		return transport.Column{Name: name, Tokenizer: file, Length: 8, Overflow: "truncate"}
	}
	cases := []struct {
		name string
		col  transport.Column
		code codes.Code
		want []string
	}{
		{"malformed", tokCol("text", filepath.Join(dir, "malformed.json")), codes.InvalidArgument,
			[]string{`column "text"`, "malformed.json", "model.merges[0]", "malformed tokenizer.json"}},
		{"not JSON", tokCol("text", filepath.Join(dir, "notjson.json")), codes.InvalidArgument,
			[]string{`column "text"`, "notjson.json", "malformed tokenizer.json"}},
		{"unsupported", tokCol("text", filepath.Join(dir, "unsupported.json")), codes.InvalidArgument,
			[]string{`column "text"`, "unsupported.json", "normalizer", `"Precompiled" is not supported`}},
		{"not text", tokCol("id", filepath.Join(dir, "tokenizer.json")), codes.InvalidArgument,
			[]string{`column "id"`, "part-00000.parquet", "int64", "not a string or large_string", "remove tokenizer"}},
		{"missing", tokCol("text", filepath.Join(dir, "missing.json")), codes.NotFound,
			[]string{`column "text"`, "missing.json", "tokenizer.json the server can read"}},
		{"outside the roots", tokCol("text", outside), codes.PermissionDenied,
			[]string{"tokenizer", outside, "not under an allowed root", "--allow"}},
	}
	for _, c := range cases {
		_, err := ts.Client.GetFlightInfo(context.Background(), cmdDescriptor(t, req(c.col)))
		checkStatus(t, "GetFlightInfo("+c.name+")", err, c.code, c.want)
		_, err = readSteps(t, context.Background(), ts.Client, req(c.col), false)
		checkStatus(t, "DoGet("+c.name+")", err, c.code, c.want)
	}
}

// TestTokenizerInvalidUTF8: a document that is not valid UTF-8 (which the
// reference cannot take) fails the stream naming the file, row group, row
// and byte.
func TestTokenizerInvalidUTF8(t *testing.T) {
	dir := t.TempDir()
	writeTokenizer(t, dir, 0)
	b := array.NewStringBuilder(memory.DefaultAllocator)
	for i := range 20 {
		if i == 17 {
			b.Append("caf\xc3 au lait") // a lead byte with no continuation, at byte 3
			continue
		}
		b.Append(fmt.Sprintf("document number %d", i))
	}
	col := b.NewArray()
	defer col.Release()
	schema := arrow.NewSchema([]arrow.Field{{Name: "text", Type: arrow.BinaryTypes.String}}, nil)
	if err := os.WriteFile(filepath.Join(dir, "bad.parquet"), parquetOf(t, schema, col, 8), 0o644); err != nil {
		t.Fatal(err)
	}
	ts := startPipeline(t, checkedMem(t), []string{dir})
	req := &transport.Request{Version: transport.Version, Datasets: []string{filepath.Join(dir, "bad.parquet")}, GlobalBatchSize: 4, NumSlices: 1,
		Slices: []int{0}, LastBatch: transport.LastBatchDrop, Epochs: 1,
		Columns: []transport.Column{{Name: "text", Tokenizer: filepath.Join(dir, "tokenizer.json"), Length: 8, Overflow: "truncate"}}}
	if _, err := ts.Client.GetFlightInfo(context.Background(), cmdDescriptor(t, req)); err != nil {
		t.Fatal(err)
	}
	_, err := readSteps(t, context.Background(), ts.Client, req, false)
	checkStatus(t, "DoGet(invalid UTF-8)", err, codes.FailedPrecondition,
		[]string{"bad.parquet row group 2 row 1 (row 17 of the file)", `column "text"`, "byte 3", "not valid UTF-8", "repair the file, or filter the row out"})
}

// TestTokenizedMixture: a mixture whose sources tokenize their text with
// different tokenizers (one without special tokens) and a filter each: every
// row's ids are its source's tokenizer's, and GetFlightInfo names each
// source's tokenizer.
func TestTokenizedMixture(t *testing.T) {
	dir := writeTextDataset(t)
	spec, src := textSpec(), textSource()
	tks := make([]*tokenize.Tokenizer, 2)
	for v := range tks {
		var err error
		if tks[v], err = tokenize.Parse("t", testTokenizerJSON(v)); err != nil {
			t.Fatal(err)
		}
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	p, err := NewPipeline(context.Background(), WithAllocator(mem), WithReadAhead(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const L = 32
	no := false
	m := &transport.Mixture{Stop: transport.MixtureStop{Rule: "num_steps", NumSteps: 10}, SourceColumn: "source"}
	for i, f := range []string{`[["id", "<", 60]]`, `[["id", ">=", 60]]`} {
		col := transport.Column{Name: "text", Tokenizer: filepath.Join(dir, "tokenizer.json"), Length: L, Overflow: "truncate"}
		if i == 1 {
			col.Tokenizer, col.AddSpecialTokens = filepath.Join(dir, "tokenizer-1.json"), &no
		}
		m.Sources = append(m.Sources, transport.MixtureSource{Datasets: []string{dir + "/*.parquet"}, Weight: float64(i + 1),
			Columns: []transport.Column{{Name: "id"}, col}, Filters: json.RawMessage(f), Shuffle: transport.Shuffle{Enabled: true, Window: 5}})
	}
	req := &transport.Request{Version: transport.Version, Mixture: m, GlobalBatchSize: 8, NumSlices: 2, Slices: []int{0, 1}, LastBatch: transport.LastBatchDrop, Seed: 7}
	info, err := p.Info(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range info.Mixture.Sources {
		if s.Tokenizers["text"] != tks[i].Hash() {
			t.Errorf("source %d tokenizers %v, want text: %s", i, s.Tokenizers, tks[i].Hash())
		}
	}
	recs := allSlices(t, p, req)
	defer releaseAll(recs)
	rows := 0
	for _, rec := range recs {
		ids := rec.Column(0).(*array.Int64).Int64Values()
		toks := fixedRows(rec.Column(1))
		srcs := rec.Column(3).(*array.Int32).Int32Values()
		for i, id := range ids {
			s := srcs[i]
			if (s == 0) != (id < 60) {
				t.Fatalf("id %d from source %d: its filter does not keep it", id, s)
			}
			want, _ := tks[s].Encode(src.TextDoc(spec, id), s == 0)
			n := min(len(want), L)
			if !slices.Equal(toks[i][:n], want[:n]) || slices.ContainsFunc(toks[i][n:], func(v int32) bool { return v != 0 }) {
				t.Fatalf("id %d source %d: ids %v, want %v", id, s, toks[i], want[:n])
			}
			rows++
		}
	}
	if rows != 80 {
		t.Errorf("%d rows, want 10 steps of 8", rows)
	}
}

// TestTokenizedMemorySizing: a stream with a tokenized column reserves the
// ids of its row groups in flight and holds its window's rows at their
// tokenized size, and that bound holds on the data: no row's ids take more
// than tokenRowBytes says per row of a row group (the footers give the
// decoded bytes per row group, so the bound is on a row group's rows, not
// on each row).
func TestTokenizedMemorySizing(t *testing.T) {
	dir := writeTextDataset(t)
	p, err := NewPipeline(context.Background(), WithReadAhead(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	req := &transport.Request{Version: transport.Version, Datasets: []string{dir + "/*.parquet"}, GlobalBatchSize: 8, NumSlices: 2,
		Slices: []int{0, 1}, LastBatch: transport.LastBatchDrop, Shuffle: transport.Shuffle{Enabled: true, Window: 16},
		Columns: []transport.Column{{Name: "id"}, {Name: "text"}}}
	plain, err := p.planFor(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	tokReq := *req
	tokReq.Columns = []transport.Column{{Name: "id"}, {Name: "text", Tokenizer: filepath.Join(dir, "tokenizer.json")}}
	tokd, err := p.planFor(context.Background(), &tokReq)
	if err != nil {
		t.Fatal(err)
	}
	a, b := p.sizeOf(plain), p.sizeOf(tokd)
	varRow := plain.ds.ArrowRowBytes()
	if b.tokens < 4*b.readAhead || a.tokens != 0 || b.window != a.window/varRow*(varRow+4*(varRow+2+1)) || b.reserve <= a.reserve+b.tokens {
		t.Errorf("sizes plain %+v, tokenized %+v: want the ids in flight (>= 4 x read-ahead %.0f) and the window at 4 x (%.0f + 3) more bytes per row", a, b, b.readAhead, varRow)
	}
	tk, _ := tokenize.Parse("t", testTokenizerJSON(0))
	spec, src := textSpec(), textSource()
	groups := map[[2]int64][2]float64{} // (file, row group): rows, bytes of ids
	for id := range spec.Docs {
		ids, _ := tk.Encode(src.TextDoc(spec, id), true)
		k := [2]int64{id / 60, (id % 60) / spec.RowGroupRows}
		g := groups[k]
		groups[k] = [2]float64{g[0] + 1, g[1] + float64(4*len(ids)+4)}
	}
	for k, g := range groups {
		if bound := g[0] * 4 * (varRow + 2 + 1); g[1] > bound {
			t.Errorf("file %d row group %d: %.0f bytes of ids, over the bound of %.0f", k[0], k[1], g[1], bound)
		}
	}
}
