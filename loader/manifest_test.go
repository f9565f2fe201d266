package loader_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/manifest"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/objstore/objstoretest"
)

// writeManifest builds the manifest of patterns on store and stores it at
// uri.
func writeManifest(t *testing.T, store objstore.Store, patterns []string, uri string) *manifest.Manifest {
	t.Helper()
	m, err := loader.BuildManifest(context.Background(), store, patterns, 0, 0, loader.WithFooterCache(nil))
	if err != nil {
		t.Fatalf("BuildManifest(%q): %v", patterns, err)
	}
	if err := manifest.Write(context.Background(), store.(objstore.Creator), uri, m); err != nil {
		t.Fatal(err)
	}
	return m
}

// randomSpec is a small random dataset.
func randomSpec(r *rand.Rand) datagen.Spec {
	s := datagen.DefaultSpec()
	s.Files = 1 + r.IntN(5)
	s.Rows = int64(s.Files) + r.Int64N(3000)
	s.RowGroupRows = 1 + r.Int64N(700)
	s.Features = r.IntN(9)
	s.Tokens = r.IntN(2) == 0
	s.TokensMin, s.TokensMax = 0, 1+r.IntN(20)
	if r.IntN(3) == 0 {
		s.Image = [3]int{2, 3, 1 + r.IntN(3)}
	}
	s.Seed = r.Uint64()
	if r.IntN(4) == 0 {
		s.Format = datagen.FormatArrow
		s.Compression = []datagen.Compression{datagen.CompressionNone, datagen.CompressionZstd}[r.IntN(2)]
	} else {
		s.Compression = datagen.Compression(r.IntN(4))
		s.Dictionary = r.IntN(3) == 0
		if r.IntN(2) == 0 {
			s.PageBytes = 256 + r.Int64N(4096)
		}
	}
	return s
}

// TestManifestPlansAsFooters: over random datasets and projections, a
// dataset planned from its manifest has the files, schema, row groups,
// costs and records of the one planned from the footers.
func TestManifestPlansAsFooters(t *testing.T) {
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, 7))
	ctx := context.Background()
	store := objstore.NewLocalStore()
	for iter := range 12 {
		dir := t.TempDir()
		s := randomSpec(r)
		if _, err := datagen.Write(ctx, datagen.LocalCreator{}, dir, s); err != nil {
			t.Fatal(err)
		}
		writeManifest(t, store, []string{dir}, manifest.DefaultURI(dir))
		all, err := loader.Open(ctx, store, []string{dir}, loader.WithFooterCache(nil))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, f := range all.Schema.Fields() {
			if r.IntN(2) == 0 {
				names = append(names, f.Name)
			}
		}
		var opts []loader.Option
		if r.IntN(2) == 0 {
			opts = append(opts, loader.WithNullsAsValidity())
		}
		if len(names) > 0 && r.IntN(3) == 0 {
			opts = append(opts, loader.WithFill(map[string]float64{names[0]: 1}))
		}
		pattern := dir
		if r.IntN(2) == 0 {
			pattern = filepath.Join(dir, "*")
		}
		opts = append(opts, loader.WithColumns(names...), loader.WithFooterCache(nil))
		want, werr := loader.Open(ctx, store, []string{pattern}, opts...)
		got, gerr := loader.Open(ctx, store, []string{pattern}, append(opts, loader.WithManifest(loader.ManifestAuto))...)
		if (werr == nil) != (gerr == nil) || (werr != nil && werr.Error() != gerr.Error()) {
			t.Fatalf("iter %d spec %+v cols %q: footers: %v, manifest: %v", iter, s, names, werr, gerr)
		}
		if werr != nil {
			continue
		}
		if pi := got.PlanInfo(); pi.Manifest != manifest.DefaultURI(dir) || pi.Requests > 2 {
			t.Fatalf("iter %d: PlanInfo = %+v, want the manifest in at most 2 requests", iter, pi)
		}
		comparePlans(t, iter, want, got)
	}
}

// comparePlans fails unless a and b plan and read the same.
func comparePlans(t *testing.T, iter int, a, b *loader.Dataset) {
	t.Helper()
	if !a.Schema.Equal(b.Schema) || !reflect.DeepEqual(a.Schema.Metadata(), b.Schema.Metadata()) {
		t.Fatalf("iter %d: schema\n%v\nwant\n%v", iter, b.Schema, a.Schema)
	}
	for i, f := range a.Schema.Fields() {
		if !f.Equal(b.Schema.Field(i)) {
			t.Fatalf("iter %d: field %d = %v, want %v", iter, i, b.Schema.Field(i), f)
		}
	}
	if len(a.Files) != len(b.Files) {
		t.Fatalf("iter %d: %d files, want %d", iter, len(b.Files), len(a.Files))
	}
	for i := range a.Files {
		fa, fb := a.Files[i], b.Files[i]
		if fa.Object.CacheKey() != fb.Object.CacheKey() || fa.Format != fb.Format || !reflect.DeepEqual(fa.RowGroups, fb.RowGroups) {
			t.Fatalf("iter %d file %d: %+v\nwant %+v", iter, i, fb, fa)
		}
	}
	refsA, refsB := a.RowGroups(), b.RowGroups()
	if !reflect.DeepEqual(refsA, refsB) {
		t.Fatalf("iter %d: RowGroups() = %+v, want %+v", iter, refsB, refsA)
	}
	for _, ref := range refsA {
		for _, span := range [][2]int64{{0, ref.Rows}, {0, ref.Rows / 2}, {ref.Rows / 3, ref.Rows}} {
			if ca, cb := a.PieceCost(ref, span[0], span[1]), b.PieceCost(ref, span[0], span[1]); ca != cb {
				t.Fatalf("iter %d: PieceCost(%+v, %v) = %d, want %d", iter, ref, span, cb, ca)
			}
		}
	}
	pa, wa := a.StreamedRowBytes()
	pb, wb := b.StreamedRowBytes()
	if pa != pb || wa != wb || a.ArrowRowBytes() != b.ArrowRowBytes() {
		t.Fatalf("iter %d: StreamedRowBytes %v %v ArrowRowBytes %v, want %v %v %v", iter, pb, wb, b.ArrowRowBytes(), pa, wa, a.ArrowRowBytes())
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	for _, ref := range refsA {
		ra, err := a.ReadRowGroup(context.Background(), ref.File, ref.Index, mem)
		if err != nil {
			t.Fatal(err)
		}
		rb, err := b.ReadRowGroup(context.Background(), ref.File, ref.Index, mem)
		if err != nil {
			t.Fatalf("iter %d: reading %+v planned from the manifest: %v", iter, ref, err)
		}
		if !array.RecordEqual(ra, rb) {
			t.Fatalf("iter %d: row group %+v differs", iter, ref)
		}
		ra.Release()
		rb.Release()
	}
}

// TestManifestStaleFileRefused: a file rewritten after the manifest is
// refused when first read, naming it and what changed; planning itself
// reads nothing of it.
func TestManifestStaleFileRefused(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := datagen.DefaultSpec()
	s.Files, s.Rows, s.RowGroupRows = 2, 100, 20
	res, err := datagen.Write(ctx, datagen.LocalCreator{}, dir, s)
	if err != nil {
		t.Fatal(err)
	}
	store := objstore.NewLocalStore()
	writeManifest(t, store, []string{dir}, manifest.DefaultURI(dir))
	victim := res.Files[1].URI
	// Rewrite the file with other rows (another size and time).
	s2 := s
	s2.Files, s2.Rows, s2.Seed = 1, 70, 9
	other := t.TempDir()
	res2, err := datagen.Write(ctx, datagen.LocalCreator{}, other, s2)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(res2.Files[0].URI)
	if err := os.WriteFile(victim, data, 0o644); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(victim, later, later); err != nil {
		t.Fatal(err)
	}
	ds, err := loader.Open(ctx, store, []string{dir}, loader.WithManifest(loader.ManifestAuto), loader.WithFooterCache(nil))
	if err != nil {
		t.Fatalf("planning from the manifest: %v", err)
	}
	if ds.NumRows() != 100 {
		t.Fatalf("NumRows = %d, want the manifest's 100", ds.NumRows())
	}
	mem := memory.NewGoAllocator()
	rec, err := ds.ReadRowGroup(ctx, 0, 0, mem)
	if err != nil {
		t.Fatalf("the unchanged file: %v", err)
	}
	rec.Release()
	_, err = ds.ReadRowGroup(ctx, 1, 0, mem)
	if !errors.Is(err, loader.ErrStale) || !strings.Contains(err.Error(), victim) || !strings.Contains(err.Error(), "size ") || !strings.Contains(err.Error(), "mtime ") {
		t.Fatalf("reading the rewritten file: %v, want loader.ErrStale naming %s, its size and mtime", err, victim)
	}
	// The same through pieces (RowGroupReader charges before it reads).
	rd := ds.NewReader(ctx, []loader.RowGroupRef{{File: 1, Index: 0, Rows: 20, Start: 0, End: 10}}, mem)
	defer rd.Close()
	if _, _, err := rd.Next(); !errors.Is(err, loader.ErrStale) {
		t.Fatalf("piece of the rewritten file: %v, want loader.ErrStale", err)
	}
}

// TestManifestRefusesBadManifests: a truncated or foreign manifest is
// refused naming it, auto or named; a named one that does not name the
// request's files is refused, an auto one is passed over with the reason.
func TestManifestRefusesBadManifests(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := datagen.DefaultSpec()
	s.Files, s.Rows = 2, 50
	res, err := datagen.Write(ctx, datagen.LocalCreator{}, dir, s)
	if err != nil {
		t.Fatal(err)
	}
	store := objstore.NewLocalStore()
	muri := manifest.DefaultURI(dir)
	writeManifest(t, store, []string{res.Files[0].URI}, muri)
	good, _ := os.ReadFile(muri)

	// Auto: the manifest names one file; the directory has two.
	ds, err := loader.Open(ctx, store, []string{dir}, loader.WithManifest(loader.ManifestAuto))
	if err != nil {
		t.Fatal(err)
	}
	// A manifest is a snapshot: the directory's files are the ones it names.
	if ds.PlanInfo().Manifest != muri || len(ds.Files) != 1 {
		t.Fatalf("auto on the directory: plan info %+v, %d files, want the manifest's 1", ds.PlanInfo(), len(ds.Files))
	}
	_, err = loader.Open(ctx, store, []string{res.Files[1].URI}, loader.WithManifest(loader.ManifestAuto))
	if err != nil {
		t.Fatalf("auto with a manifest not naming the file: %v, want footers", err)
	}
	ds, _ = loader.Open(ctx, store, []string{res.Files[1].URI}, loader.WithManifest(loader.ManifestAuto))
	if pi := ds.PlanInfo(); pi.Manifest != "" || !strings.Contains(pi.Reason, "does not name") {
		t.Fatalf("PlanInfo = %+v, want footers with the reason", pi)
	}
	if _, err := loader.Open(ctx, store, []string{res.Files[1].URI}, loader.WithManifest(muri)); !errors.Is(err, loader.ErrManifest) {
		t.Fatalf("a named manifest not naming the file: %v, want loader.ErrManifest", err)
	}

	foreign, _ := os.ReadFile(res.Files[1].URI) // Parquet, but no manifest
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"truncated", good[:len(good)/2]},
		{"cut at the end", good[:len(good)-3]},
		{"foreign Parquet", foreign},
		{"not Parquet", []byte("hello, world, not a manifest")},
	} {
		if err := os.WriteFile(muri, tc.data, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, mode := range []string{loader.ManifestAuto, muri} {
			_, err := loader.Open(ctx, store, []string{res.Files[0].URI}, loader.WithManifest(mode))
			if !errors.Is(err, loader.ErrManifest) || !strings.Contains(err.Error(), muri) {
				t.Errorf("%s manifest (%s): %v, want loader.ErrManifest naming %s", tc.name, mode, err, muri)
			}
		}
	}
}

// TestManifestShardsMerge: parts built over 4 shards and merged equal, byte
// for byte, the manifest built in one process.
func TestManifestShardsMerge(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := datagen.DefaultSpec()
	s.Files, s.Rows, s.RowGroupRows, s.Tokens, s.TokensMax = 11, 500, 30, true, 5
	if _, err := datagen.Write(ctx, datagen.LocalCreator{}, dir, s); err != nil {
		t.Fatal(err)
	}
	store := objstore.NewLocalStore()
	one, err := loader.BuildManifest(ctx, store, []string{dir}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var parts []*manifest.Manifest
	for _, k := range []int{2, 0, 3, 1} {
		p, err := loader.BuildManifest(ctx, store, []string{dir}, k, 4)
		if err != nil {
			t.Fatal(err)
		}
		// Round trip each part through its own file, as processes would.
		var buf bytes.Buffer
		puri := filepath.Join(t.TempDir(), "part.parquet")
		if err := manifest.Encode(&buf, p, puri); err != nil {
			t.Fatal(err)
		}
		if p, err = manifest.Decode(buf.Bytes(), puri); err != nil {
			t.Fatal(err)
		}
		parts = append(parts, p)
	}
	merged, err := manifest.Merge(parts)
	if err != nil {
		t.Fatal(err)
	}
	uri := manifest.DefaultURI(dir)
	var a, b bytes.Buffer
	if err := manifest.Encode(&a, one, uri); err != nil {
		t.Fatal(err)
	}
	if err := manifest.Encode(&b, merged, uri); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatalf("merged manifest (%d bytes) differs from the single build (%d bytes)", b.Len(), a.Len())
	}
	if _, err := manifest.Merge(parts[:3]); !errors.Is(err, manifest.ErrMerge) {
		t.Fatalf("merging 3 of 4 shards: %v, want ErrMerge", err)
	}
}

// TestManifestGCSGenerationChanged: on GCS, an object rewritten with the
// same bytes after the manifest (a new generation, same size) is refused
// when first read, naming the generations.
func TestManifestGCSGenerationChanged(t *testing.T) {
	ctx := context.Background()
	gcs := objstoretest.NewFakeGCS(t, "b")
	store := gcs.Store(t)
	s := datagen.DefaultSpec()
	s.Files, s.Rows, s.RowGroupRows = 2, 60, 20
	res, err := datagen.Write(ctx, store, "gs://b/ds", s)
	if err != nil {
		t.Fatal(err)
	}
	writeManifest(t, store, []string{"gs://b/ds/"}, manifest.DefaultURI("gs://b/ds"))
	victim := res.Files[0].URI
	before, _ := store.Stat(ctx, victim)
	data := make([]byte, before.Size)
	if err := store.ReadAt(ctx, before, data, 0); err != nil {
		t.Fatal(err)
	}
	after := gcs.Put(t, store, victim, data)
	ds, err := loader.Open(ctx, store, []string{"gs://b/ds/"}, loader.WithManifest(loader.ManifestAuto), loader.WithFooterCache(nil))
	if err != nil || ds.PlanInfo().Manifest == "" {
		t.Fatalf("planning: %v, %+v", err, ds.PlanInfo())
	}
	mem := memory.NewGoAllocator()
	rec, err := ds.ReadRowGroup(ctx, 1, 0, mem)
	if err != nil {
		t.Fatalf("the unchanged object: %v", err)
	}
	rec.Release()
	_, err = ds.ReadRowGroup(ctx, 0, 0, mem)
	want := fmt.Sprintf("generation %d -> %d", before.Generation, after.Generation)
	if !errors.Is(err, loader.ErrStale) || !strings.Contains(err.Error(), victim) || !strings.Contains(err.Error(), want) {
		t.Fatalf("reading the rewritten object: %v, want ErrStale naming %s and %q", err, victim, want)
	}
}
