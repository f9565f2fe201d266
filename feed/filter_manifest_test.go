package feed

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshfeed/meshfeed/filter"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/manifest"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/transport"
)

// readCounter is a store that counts the bytes read from each object.
type readCounter struct {
	objstore.Store
	mu    sync.Mutex
	bytes map[string]int64
}

func (s *readCounter) ReadAt(ctx context.Context, obj objstore.Object, p []byte, off int64) error {
	s.mu.Lock()
	s.bytes[obj.URI] += int64(len(p))
	s.mu.Unlock()
	return s.Store.ReadAt(ctx, obj, p, off)
}

// dataBytes is the bytes read from objects other than manifests.
func (s *readCounter) dataBytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := int64(0)
	for u, b := range s.bytes {
		if !strings.HasPrefix(filepath.Base(u), "_meshfeed_manifest") {
			n += b
		}
	}
	return n
}

// writeManifestWithSelections writes dir's manifest, with the selections
// of each of filters stored as facts (as `meshfeed manifest --filters`
// does).
func writeManifestWithSelections(t testing.TB, dir string, filters ...string) {
	t.Helper()
	ctx := context.Background()
	store := objstore.NewLocalStore()
	m, err := loader.BuildManifest(ctx, store, []string{dir}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, fj := range filters {
		pred, err := filter.Parse([]byte(fj))
		if err != nil {
			t.Fatal(err)
		}
		objs := make([]objstore.Object, len(m.Files))
		for i, f := range m.Files {
			objs[i] = f.Object()
		}
		ds, err := loader.OpenObjects(ctx, store, objs, loader.WithColumns(pred.Columns()...), loader.WithNullsAsValidity())
		if err != nil {
			t.Fatal(err)
		}
		fsels, canon, _, err := FileSelections(ctx, ds, []byte(fj))
		if err != nil {
			t.Fatal(err)
		}
		for i, fs := range fsels {
			if err := m.PutFact(ds.Files[i].Object, filter.SelectionFactKind, canon, filter.EncodeFileSelection(fs)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := manifest.Write(ctx, store, manifest.DefaultURI(dir), m); err != nil {
		t.Fatal(err)
	}
}

// planCounts are FilterStats' file counters after one plan.
type planCounts struct{ stored, planned, evaluated, decoded int64 }

// planAndStream plans req on a fresh Pipeline over a counting store and
// returns the info, the filter counters and data bytes read at plan time,
// and the ids delivered.
func planAndStream(t *testing.T, req *transport.Request) (*transport.PlanInfo, planCounts, int64, [][]int64) {
	t.Helper()
	rc := &readCounter{Store: objstore.NewLocalStore(), bytes: map[string]int64{}}
	p, err := NewPipeline(context.Background(), WithStore(rc), WithCacheTTL(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	info, err := p.Info(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	planBytes := rc.dataBytes()
	fs := p.FilterStats()
	c := planCounts{fs.Stored.Load(), fs.Planned.Load(), fs.Evaluated.Load(), fs.DecodedBytes.Load()}
	ids, _ := streamIDs(t, p, req)
	return info, c, planBytes, ids
}

// TestFilterManifestSelections: a scattered filter planned from a manifest
// holding its selections reads no byte of a data file at plan time and
// plans and delivers what planning from the footers does; a manifest
// without the fact, or with the fact of another filter, evaluates as
// before.
func TestFilterManifestSelections(t *testing.T) {
	const stored = `[["label", "<", 100]]`
	dir := writeDataset(t, filterSpec())
	req := filterRequest(dir, stored, 2)
	off := *req
	off.Manifest = "off"
	wantInfo, wantStats, _, wantIDs := planAndStream(t, &off)
	if wantStats.evaluated == 0 || wantStats.stored != 0 {
		t.Fatalf("from the footers: %d row groups evaluated, %d files stored: want the filter evaluated", wantStats.evaluated, wantStats.stored)
	}

	writeManifestWithSelections(t, dir, stored, `[["id", "<", 3]]`)
	info, fs, planBytes, ids := planAndStream(t, req)
	if info.Manifest != manifest.DefaultURI(dir) {
		t.Fatalf("planned from %q, want the manifest", info.Manifest)
	}
	if fs.stored != 2 || fs.planned != 0 || fs.evaluated != 0 || fs.decoded != 0 || planBytes != 0 {
		t.Errorf("from the manifest's facts: %d files stored, %d planned, %d row groups evaluated, %d filter bytes decoded, %d data bytes read at plan time; want 2 stored, nothing read",
			fs.stored, fs.planned, fs.evaluated, fs.decoded, planBytes)
	}
	if info.NumRows != wantInfo.NumRows || info.StepsPerEpoch != wantInfo.StepsPerEpoch || !slices.EqualFunc(ids, wantIDs, slices.Equal) {
		t.Errorf("from the manifest: %d rows, %d steps; from the footers %d rows, %d steps (ids equal: %v)",
			info.NumRows, info.StepsPerEpoch, wantInfo.NumRows, wantInfo.StepsPerEpoch, slices.EqualFunc(ids, wantIDs, slices.Equal))
	}

	// Another filter (same column, another bound): its selection is not
	// stored, so it is evaluated, and still planned from the manifest.
	other := filterRequest(dir, `[["label", "<", 101]]`, 2)
	_, fs, planBytes, _ = planAndStream(t, other)
	if fs.stored != 0 || fs.planned != 2 || fs.evaluated == 0 || planBytes == 0 {
		t.Errorf("a filter without a stored selection: %d stored, %d planned, %d evaluated, %d bytes read: want it evaluated", fs.stored, fs.planned, fs.evaluated, planBytes)
	}

	// A manifest without facts: evaluated as before, same rows.
	writeManifestWithSelections(t, dir)
	info, fs, _, ids = planAndStream(t, req)
	if info.Manifest == "" || fs.stored != 0 || fs.planned != 2 || info.NumRows != wantInfo.NumRows || !slices.EqualFunc(ids, wantIDs, slices.Equal) {
		t.Errorf("a manifest without the fact: manifest %q, %d stored, %d planned, %d rows (want %d), ids equal %v",
			info.Manifest, fs.stored, fs.planned, info.NumRows, wantInfo.NumRows, slices.EqualFunc(ids, wantIDs, slices.Equal))
	}
}

// TestFilterManifestSelectionsStaleFile: a file changed after the manifest
// stored its selection plans from the fact (planning makes no Stat), but
// no row of it is delivered: the stream fails naming it (ErrStale).
func TestFilterManifestSelectionsStaleFile(t *testing.T) {
	const stored = `[["label", "<", 100]]`
	dir := writeDataset(t, filterSpec())
	writeManifestWithSelections(t, dir, stored)
	files, _ := filepath.Glob(filepath.Join(dir, "[^_]*.parquet"))
	if len(files) == 0 {
		t.Fatal("no data files")
	}
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(files[0], later, later); err != nil {
		t.Fatal(err)
	}
	p, err := NewPipeline(context.Background(), WithCacheTTL(0))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	st, err := p.Open(ctx, filterRequest(dir, stored, 2))
	if err == nil {
		defer st.Close()
		for {
			var step transport.Step
			step, err = st.Next(ctx)
			if err != nil {
				break
			}
			step.Release()
		}
	}
	if errors.Is(err, io.EOF) || !errors.Is(err, loader.ErrStale) || !strings.Contains(err.Error(), filepath.Base(files[0])) {
		t.Fatalf("streaming with a changed file: %v, want ErrStale naming %s", err, files[0])
	}
	if p.FilterStats().Stored.Load() != 2 || p.FilterStats().Planned.Load() != 0 {
		t.Errorf("%d files' selections from the manifest, %d computed: want 2 from the manifest", p.FilterStats().Stored.Load(), p.FilterStats().Planned.Load())
	}
}

// TestFilterManifestSelectionsPassedOver: a stored selection computed from
// another version of its file, or one that does not decode, is passed
// over: the file is evaluated, and the rows are the footers' ones.
func TestFilterManifestSelectionsPassedOver(t *testing.T) {
	const stored = `[["label", "<", 100]]`
	dir := writeDataset(t, filterSpec())
	req := filterRequest(dir, stored, 2)
	off := *req
	off.Manifest = "off"
	wantInfo, _, _, wantIDs := planAndStream(t, &off)
	writeManifestWithSelections(t, dir, stored)
	ctx := context.Background()
	store := objstore.NewLocalStore()
	m, err := manifest.Read(ctx, store, manifest.DefaultURI(dir))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Files) != 2 || len(m.Files[0].Facts) != 1 || len(m.Files[1].Facts) != 1 {
		t.Fatalf("manifest: %d files, want 2 with one fact each", len(m.Files))
	}
	m.Files[0].Facts[0].Identity = "s1;m1" // computed from another version
	v := m.Files[1].Facts[0].Value
	m.Files[1].Facts[0].Value = v[:len(v)-1] // damaged
	if err := manifest.Write(ctx, store, manifest.DefaultURI(dir), m); err != nil {
		t.Fatal(err)
	}
	info, fs, _, ids := planAndStream(t, req)
	if info.Manifest == "" || fs.stored != 0 || fs.planned != 2 {
		t.Errorf("stale and damaged facts: manifest %q, %d files stored, %d planned: want both evaluated", info.Manifest, fs.stored, fs.planned)
	}
	if info.NumRows != wantInfo.NumRows || !slices.EqualFunc(ids, wantIDs, slices.Equal) {
		t.Errorf("stale and damaged facts: %d rows, want %d (ids equal %v)", info.NumRows, wantInfo.NumRows, slices.EqualFunc(ids, wantIDs, slices.Equal))
	}
}
