package feed

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"google.golang.org/grpc/codes"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/transport"
)

// badDir writes the directory root/name holding files (name -> bytes).
func badDir(t *testing.T, root, name string, files map[string][]byte) string {
	t.Helper()
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for f, b := range files {
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// goodFile returns the bytes of the first file datagen writes for spec.
func goodFile(t *testing.T, spec datagen.Spec) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(writeDataset(t, spec), "part-00000.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// parquetOf is a Parquet file (arrow-go's writer) of one column, in row
// groups of rowGroup rows.
func parquetOf(t *testing.T, schema *arrow.Schema, col arrow.Array, rowGroup int64) []byte {
	t.Helper()
	rec := array.NewRecordBatch(schema, []arrow.Array{col}, int64(col.Len()))
	defer rec.Release()
	tbl := array.NewTableFromRecords(schema, []arrow.RecordBatch{rec})
	defer tbl.Release()
	var sb strings.Builder
	if err := pqarrow.WriteTable(tbl, &sb, rowGroup, nil, pqarrow.DefaultWriterProps()); err != nil {
		t.Fatal(err)
	}
	return []byte(sb.String())
}

// nullFile is a Parquet file with an int64 column "id" holding a null.
func nullFile(t *testing.T) []byte {
	t.Helper()
	schema := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64, Nullable: true}}, nil)
	bld := array.NewInt64Builder(memory.DefaultAllocator)
	defer bld.Release()
	bld.AppendValues([]int64{1, 2, 0, 4, 5, 6, 7, 8}, []bool{true, true, false, true, true, true, true, true})
	col := bld.NewArray()
	defer col.Release()
	return parquetOf(t, schema, col, 8)
}

// decimalFile is a Parquet file with a decimal128(9, 2) column "price".
func decimalFile(t *testing.T) []byte {
	t.Helper()
	typ := &arrow.Decimal128Type{Precision: 9, Scale: 2}
	schema := arrow.NewSchema([]arrow.Field{{Name: "price", Type: typ}}, nil)
	bld := array.NewDecimal128Builder(memory.DefaultAllocator, typ)
	defer bld.Release()
	for i := 0; i < 8; i++ {
		bld.Append(decimal128.FromI64(int64(100 * i)))
	}
	col := bld.NewArray()
	defer col.Release()
	return parquetOf(t, schema, col, 8)
}

// liveStream reads an unbounded DoGet one step at a time, hashing each step
// like stepSums.
type liveStream struct {
	rdr *flight.Reader
}

func (l *liveStream) next(t *testing.T) string {
	t.Helper()
	if !l.rdr.Next() {
		t.Fatalf("healthy stream ended: %v", l.rdr.Err())
	}
	h := sha256.New()
	h.Write(l.rdr.LatestAppMetadata())
	w := ipc.NewWriter(h, ipc.WithSchema(l.rdr.Schema()))
	if err := w.Write(l.rdr.RecordBatch()); err != nil {
		t.Fatal(err)
	}
	w.Close()
	return hex.EncodeToString(h.Sum(nil))
}

// TestBadInputMatrix sends every bad input that reaches the server through a
// real Pipeline server, one case at a time, while a healthy stream runs on
// the same server: each case ends with the documented gRPC code and a message
// naming the culprit (file, column, field or value), nothing panics or hangs,
// and after every case the healthy stream delivers its next step, identical
// to an undisturbed run's.
func TestBadInputMatrix(t *testing.T) {
	spec := pipeSpec()
	root := t.TempDir()
	good := writeDataset(t, spec)
	gb := goodFile(t, spec)
	other := spec
	other.Features = 4
	ob := goodFile(t, other)

	corruptFooter := append([]byte(nil), gb...)
	for i := len(corruptFooter) - 200; i < len(corruptFooter)-8; i++ {
		corruptFooter[i] = 0xff
	}
	corruptPage := append([]byte(nil), gb...)
	for i := 4; i < 40; i++ {
		corruptPage[i] = 0xee
	}
	dirs := map[string]string{
		"footer":    badDir(t, root, "footer", map[string][]byte{"a.parquet": corruptFooter}),
		"truncated": badDir(t, root, "truncated", map[string][]byte{"a.parquet": gb[:len(gb)/2]}),
		"page":      badDir(t, root, "page", map[string][]byte{"a.parquet": corruptPage}),
		"mismatch":  badDir(t, root, "mismatch", map[string][]byte{"a.parquet": gb, "b.parquet": ob}),
		"decimal":   badDir(t, root, "decimal", map[string][]byte{"a.parquet": decimalFile(t)}),
		"empty":     badDir(t, root, "empty", map[string][]byte{"a.parquet": {}}),
	}
	mem := checkedMem(t)
	p, err := NewPipeline(context.Background(), WithAllocator(mem),
		WithLoaderOptions(loader.WithDecodeWorkers(2), loader.WithFooterCache(nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ts := startServer(t, viaTCP, p, []transport.Option{transport.WithAllowedRoots(root, good)})

	// The healthy stream and its undisturbed reference.
	healthy := pipeRequest(good, 8, 2, []int{0, 1}, transport.LastBatchPad)
	healthy.Shuffle = transport.Shuffle{Enabled: true, Window: 10}
	healthy.Epochs = 3
	want, err := stepSums(context.Background(), ts.Client, healthy, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	healthy.Epochs = 0
	hctx, hcancel := context.WithCancel(context.Background())
	defer hcancel()
	hs, err := ts.Client.DoGet(hctx, ticket(t, healthy))
	if err != nil {
		t.Fatal(err)
	}
	rdr, err := flight.NewRecordReader(hs)
	if err != nil {
		t.Fatal(err)
	}
	defer rdr.Release()
	live := &liveStream{rdr: rdr}
	hstep := 0
	checkHealthy := func(after string) {
		t.Helper()
		if got := live.next(t); got != want[hstep] {
			t.Fatalf("after %s: healthy stream step %d differs from the undisturbed run", after, hstep)
		}
		hstep++
	}
	checkHealthy("start")

	req := func(dir string, mut func(r *transport.Request)) []byte {
		r := pipeRequest(dir, 8, 2, []int{0, 1}, transport.LastBatchPad)
		r.Epochs = 1
		if mut != nil {
			mut(r)
		}
		b, err := r.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	big := req(good, func(r *transport.Request) {
		r.Datasets = []string{good + "/" + strings.Repeat("x", transport.MaxTicketBytes)}
	})
	past := req(good, func(r *transport.Request) { r.Start = transport.Position{Step: 13} })
	cases := []struct {
		name    string
		ticket  []byte
		ctx     func() (context.Context, context.CancelFunc)
		code    codes.Code
		message []string
	}{
		{"corrupt footer", req(dirs["footer"], nil), nil, codes.FailedPrecondition, []string{dirs["footer"] + "/a.parquet", "corrupt"}},
		{"truncated file", req(dirs["truncated"], nil), nil, codes.FailedPrecondition, []string{dirs["truncated"] + "/a.parquet"}},
		{"corrupt page", req(dirs["page"], nil), nil, codes.FailedPrecondition, []string{dirs["page"] + "/a.parquet", "row group 0"}},
		{"schema mismatch", req(dirs["mismatch"], nil), nil, codes.FailedPrecondition, []string{"a.parquet", "b.parquet", "features"}},
		{"missing column", req(good, func(r *transport.Request) { r.Columns = []transport.Column{{Name: "id"}, {Name: "nope"}} }), nil,
			codes.InvalidArgument, []string{`"nope"`}},
		{"fill for a decimal", req(dirs["decimal"], func(r *transport.Request) { r.Columns = []transport.Column{{Name: "price", Fill: []byte("0")}} }), nil,
			codes.FailedPrecondition, []string{dirs["decimal"] + "/a.parquet", `"price"`, "decimal", "fill"}},
		{"empty file", req(dirs["empty"], nil), nil, codes.FailedPrecondition, []string{dirs["empty"] + "/a.parquet"}},
		{"zero matching files", req(good, func(r *transport.Request) { r.Datasets = []string{good + "/none-*.parquet"} }), nil,
			codes.NotFound, []string{"none-*.parquet"}},
		{"B % D != 0", req(good, func(r *transport.Request) { r.GlobalBatchSize, r.NumSlices = 9, 2 }), nil,
			codes.InvalidArgument, []string{"not a multiple of num_slices"}},
		{"raise with remainder", req(good, func(r *transport.Request) { r.LastBatch = transport.LastBatchRaise }), nil,
			codes.FailedPrecondition, []string{"N=103", "B=8", "remainder"}},
		{"start past the end", past, nil, codes.FailedPrecondition, []string{"start step 13", "13 steps"}},
		{"malformed ticket", []byte(`{"version":1,"datasets":[`), nil, codes.InvalidArgument, []string{"invalid request"}},
		{"unknown field", []byte(`{"version":1,"colums":[]}`), nil, codes.InvalidArgument, []string{`"colums"`}},
		{"wrong version", []byte(`{"version":2}`), nil, codes.InvalidArgument, []string{"version"}},
		{"oversized ticket", big, nil, codes.InvalidArgument, []string{"ticket too large"}},
		{"outside the roots", req(good, func(r *transport.Request) { r.Datasets = []string{"/etc/passwd"} }), nil,
			codes.PermissionDenied, []string{`"/etc/passwd"`, "allowed root"}},
		{"dot-dot traversal", req(good, func(r *transport.Request) { r.Datasets = []string{root + "/../etc/*.parquet"} }), nil,
			codes.PermissionDenied, []string{`".."`}},
		{"cast overflow", req(good, func(r *transport.Request) { r.Columns = []transport.Column{{Name: "label", DType: "int8"}} }), nil,
			codes.FailedPrecondition, []string{`"label"`, "int8"}},
		{"unknown dtype", req(good, func(r *transport.Request) { r.Columns = []transport.Column{{Name: "id", DType: "int3"}} }), nil,
			codes.InvalidArgument, []string{`"id"`, `"int3"`}},
		{"cancelled deadline", req(good, nil), func() (context.Context, context.CancelFunc) {
			return context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		}, codes.DeadlineExceeded, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			if c.ctx != nil {
				cancel()
				ctx, cancel = c.ctx()
			}
			defer cancel()
			_, err := stepSumsRaw(ctx, ts.Client, c.ticket, 0, nil)
			checkStatus(t, "DoGet("+c.name+")", err, c.code, c.message)
		})
		checkHealthy(c.name)
	}
	hcancel()
	waitFor(t, "no stream active", func() bool { return ts.Srv.Metrics().StreamsActive == 0 })
}

// TestBadInputNonLoopbackBind: binding a non-loopback address without TLS
// and token (and without the explicit insecure flag) is refused at transport.New,
// naming the address.
func TestBadInputNonLoopbackBind(t *testing.T) {
	_, err := transport.New(&transport.DemoBackend{NumRows: 10}, transport.WithLogger(discard), transport.WithAddress("0.0.0.0:0"), transport.WithAllowedRoots("/data"))
	if err == nil || !strings.Contains(err.Error(), "0.0.0.0:0") {
		t.Fatalf("New(addr 0.0.0.0:0, no TLS) = %v, want an error naming the address", err)
	}
}

// TestOverflowNamesFileRow: a value that does not fit the requested dtype
// fails the stream with an error naming the column, the file, its row group
// and the row, in the file and in its row group, however the rows were
// shuffled on their way into the step.
func TestOverflowNamesFileRow(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil)
	write := func(bad int) []byte {
		bld := array.NewInt64Builder(memory.DefaultAllocator)
		defer bld.Release()
		for i := range 40 {
			v := int64(i)
			if i == bad {
				v = 1 << 40
			}
			bld.Append(v)
		}
		col := bld.NewArray()
		defer col.Release()
		return parquetOf(t, schema, col, 16)
	}
	root := t.TempDir()
	// b.parquet's row 21 (row group 1, row 5): past a.parquet's 40 rows.
	dir := badDir(t, root, "ds", map[string][]byte{"a.parquet": write(-1), "b.parquet": write(21)})
	ts := startPipeline(t, memory.DefaultAllocator, []string{root})
	for _, shuffle := range []bool{false, true} {
		req := pipeRequest(dir, 8, 2, []int{0, 1}, transport.LastBatchDrop)
		req.Columns = []transport.Column{{Name: "id", DType: "int32"}}
		if shuffle {
			req.Shuffle = transport.Shuffle{Enabled: true, Window: 16}
		}
		_, err := readSteps(t, context.Background(), ts.Client, req, false)
		checkStatus(t, fmt.Sprintf("DoGet(shuffle %v)", shuffle), err, codes.FailedPrecondition,
			[]string{`"id"`, "1099511627776", "does not fit", "b.parquet row group 1 row 5 (row 21 of the file)"})
	}
}
