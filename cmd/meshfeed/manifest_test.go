package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestManifestCommand: parts built with --shard and merged equal the
// single build byte for byte, and plan uses the manifest (at most 2 store
// requests) with the same plan as the footers give.
func TestManifestCommand(t *testing.T) {
	dir, _ := planDataset(t, 900, 7, 50)
	ctx := context.Background()
	def := filepath.Join(dir, "_meshfeed_manifest.parquet")
	if err := runManifest(ctx, []string{"--out", filepath.Join(dir, "_single.parquet"), dir}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"0/3", "1/3", "2/3"} {
		if err := runManifest(ctx, []string{"--shard", s, dir}); err != nil {
			t.Fatalf("manifest --shard %s: %v", s, err)
		}
	}
	parts, _ := filepath.Glob(filepath.Join(dir, "_meshfeed_manifest.part-*-of-3.parquet"))
	if len(parts) != 3 {
		t.Fatalf("parts written: %q, want 3", parts)
	}
	if err := runManifest(ctx, append([]string{"merge", "--out", def}, parts...)); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(filepath.Join(dir, "_single.parquet"))
	b, _ := os.ReadFile(def)
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Fatalf("merged manifest (%d bytes) differs from the single build (%d bytes)", len(b), len(a))
	}
	if err := runManifest(ctx, append([]string{"merge", "--out", def}, parts[:2]...)); err == nil {
		t.Fatal("merging 2 of 3 parts succeeded")
	}

	args := []string{"--data", dir, "--global-batch-size", "40", "--mesh", "data=4", "--batch-axes", "data", "--processes", "2"}
	type info struct {
		Manifest     string `json:"manifest"`
		PlanRequests int64  `json:"plan_requests"`
	}
	run := func(extra ...string) (planJSON, info) {
		out, err := planRunRaw(t, append(append([]string{"--json"}, args...), extra...)...)
		if err != nil {
			t.Fatal(err)
		}
		var rep planJSON
		var in info
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		_ = json.Unmarshal([]byte(out), &in)
		return rep, in
	}
	withM, mi := run()
	without, fi := run("--manifest", "off")
	if mi.Manifest != def || mi.PlanRequests > 2 {
		t.Fatalf("plan with a manifest: %+v, want %s in at most 2 requests", mi, def)
	}
	// (The footers come from the process's footer cache here, filled by
	// the builds above: few requests, but no manifest.)
	if fi.Manifest != "" {
		t.Fatalf("plan --manifest off: %+v, want the footers", fi)
	}
	if !reflect.DeepEqual(withM, without) {
		t.Fatalf("plan from the manifest %+v\nfrom the footers %+v", withM, without)
	}
}
