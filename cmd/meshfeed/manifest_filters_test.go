package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/meshfeed/meshfeed/filter"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/manifest"
	"github.com/meshfeed/meshfeed/objstore"
)

// TestManifestFilters: manifest --filters stores each filter's selections
// (also through --shard parts and merge, byte for byte as a single build);
// plan --filters then takes them from the manifest (no row group
// evaluated) and plans what the footers plan; another filter is evaluated.
func TestManifestFilters(t *testing.T) {
	dir, _ := planDataset(t, 3000, 3, 250)
	ctx := context.Background()
	const f1, f2 = `[["label", "<", 100]]`, `[["id", ">=", 1200]]`
	def := filepath.Join(dir, "_meshfeed_manifest.parquet")
	single := filepath.Join(dir, "_single.parquet")
	if err := runManifest(ctx, []string{"--out", single, "--filters", f1, "--filters", f2, dir}); err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, s := range []string{"0/2", "1/2"} {
		out := filepath.Join(dir, "_part"+s[:1]+".parquet")
		if err := runManifest(ctx, []string{"--shard", s, "--out", out, "--filters", f1, "--filters", f2, dir}); err != nil {
			t.Fatalf("manifest --shard %s: %v", s, err)
		}
		parts = append(parts, out)
	}
	if err := runManifest(ctx, append([]string{"merge", "--out", def}, parts...)); err != nil {
		t.Fatal(err)
	}
	ab, _ := os.ReadFile(single)
	bb, _ := os.ReadFile(def)
	if len(ab) == 0 || !bytes.Equal(ab, bb) {
		t.Fatalf("merged manifest (%d bytes) differs from the single build (%d bytes)", len(bb), len(ab))
	}
	b, err := manifest.Read(ctx, objstore.NewLocalStore(), def)
	if err != nil {
		t.Fatal(err)
	}
	p1, _ := filter.Parse([]byte(f1))
	for _, f := range b.Files {
		v, ok := b.Fact(f.Object(), filter.SelectionFactKind, p1.Canonical())
		if !ok {
			t.Fatalf("%s: no stored selection of %s (facts %+v)", f.URI, f1, f.Facts)
		}
		fs, err := filter.DecodeFileSelection(v)
		if err != nil || len(fs.RowGroups) != len(f.RowGroups) {
			t.Fatalf("%s: stored selection %v (%v), want %d row groups", f.URI, fs, err, len(f.RowGroups))
		}
	}

	base := []string{"--json", "--data", dir, "--columns", "id", "--global-batch-size", "8", "--mesh", "data=4", "--batch-axes", "data"}
	plan := func(filters string, extra ...string) (planJSON, map[string]int64) {
		out, err := planRunRaw(t, append(append(append([]string(nil), base...), extra...), "--filters", filters)...)
		if err != nil {
			t.Fatal(err)
		}
		var rep planJSON
		var counts struct {
			C map[string]int64 `json:"filter_row_groups"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		_ = json.Unmarshal([]byte(out), &counts)
		return rep, counts.C
	}
	for _, f := range []string{f1, f2} {
		withM, cm := plan(f)
		without, cf := plan(f, "--manifest", "off")
		if cm["stored_files"] != 3 || cm["evaluated"] != 0 || cm["pruned"] != 0 {
			t.Errorf("plan --filters %s from the manifest: counts %v, want the 3 files' selections stored, nothing evaluated", f, cm)
		}
		if cf["stored_files"] != 0 {
			t.Errorf("plan --filters %s from the footers: counts %v", f, cf)
		}
		if !reflect.DeepEqual(withM, without) {
			t.Errorf("plan --filters %s from the stored selections %+v\nfrom the footers %+v", f, withM, without)
		}
	}
	if _, c := plan(`[["label", "<", 99]]`); c["stored_files"] != 0 || c["evaluated"] == 0 {
		t.Errorf("plan of a filter not stored: counts %v, want it evaluated", c)
	}

	if err := runManifest(ctx, []string{"--out", single, "--filters", `[["label", "<>", 1]]`, dir}); err == nil || !strings.Contains(err.Error(), "<>") {
		t.Errorf("manifest --filters with a bad op: %v", err)
	}
	if err := runManifest(ctx, []string{"--out", single, "--filters", `[["nope", "==", 1]]`, dir}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("manifest --filters on a missing column: %v", err)
	}
}

// TestManifestFiltersChangedFile: a file that changed after the manifest's
// entries were read is refused by --filters, naming it, not stored.
func TestManifestFiltersChangedFile(t *testing.T) {
	dir, _ := planDataset(t, 1000, 2, 250)
	ctx := context.Background()
	store := objstore.NewLocalStore()
	m, err := loader.BuildManifest(ctx, store, []string{dir}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	changed := filepath.Join(dir, "part-00001.parquet")
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(changed, later, later); err != nil {
		t.Fatal(err)
	}
	err = storeSelections(ctx, store, []string{dir}, m, []string{`[["label", "<", 100]]`})
	if !errors.Is(err, manifest.ErrStale) || !strings.Contains(err.Error(), "part-00001.parquet") {
		t.Fatalf("--filters over a changed file: %v, want ErrStale naming part-00001.parquet", err)
	}
	for _, f := range m.Files {
		if strings.HasSuffix(f.URI, "part-00001.parquet") && len(f.Facts) != 0 {
			t.Errorf("a fact was stored for the changed file: %+v", f.Facts)
		}
	}
}
