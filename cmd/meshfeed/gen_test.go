package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore/objstoretest"
)

func TestParseGenArgs(t *testing.T) {
	def := datagen.DefaultSpec()
	mod := func(f func(*datagen.Spec)) datagen.Spec { s := def; f(&s); return s }
	for _, tc := range []struct {
		args     string
		want     datagen.Spec
		ifAbsent bool
	}{
		{"--out d", def, false},
		{"--out d --rows 2000000 --files 4 --row-group-rows 65536 --features 64 --compression snappy --if-absent",
			mod(func(s *datagen.Spec) {
				s.Rows, s.Files, s.RowGroupRows, s.Compression = 2000000, 4, 65536, datagen.CompressionSnappy
			}), true},
		{"-out d -tokens 16:512 -image 32x24x3 -seed 7 -features 0",
			mod(func(s *datagen.Spec) {
				s.Tokens, s.TokensMin, s.TokensMax, s.Image, s.Seed, s.Features = true, 16, 512, [3]int{32, 24, 3}, 7, 0
			}), false},
		{"--out d --tokens 0:0", mod(func(s *datagen.Spec) { s.Tokens = true }), false},
		{"--out d --format arrow --compression lz4", mod(func(s *datagen.Spec) {
			s.Format, s.Compression = datagen.FormatArrow, datagen.CompressionLZ4
		}), false},
		{"--out d --dictionary --compression gzip", mod(func(s *datagen.Spec) {
			s.Dictionary, s.Compression = true, datagen.CompressionGzip
		}), false},
		{"--out d --compression zstd", mod(func(s *datagen.Spec) { s.Compression = datagen.CompressionZstd }), false},
		{"--out d --compression none", def, false},
	} {
		got, err := parseGenArgs(strings.Fields(tc.args), io.Discard)
		if err != nil || got.spec != tc.want || got.ifAbsent != tc.ifAbsent || got.out != "d" {
			t.Errorf("parseGenArgs(%q) = %+v, %v, want %+v if-absent %v", tc.args, got, err, tc.want, tc.ifAbsent)
		}
	}
}

func TestParseGenArgsErrors(t *testing.T) {
	for _, tc := range []struct {
		args string
		want []string // every one must appear in the error
	}{
		{"", []string{"--out is required"}},
		{"--out d --compression brotli", []string{"-compression", "brotli", "none, snappy, zstd, gzip, lz4"}},
		{"--out d --compression LZ4", []string{"-compression", "none, snappy, zstd, gzip, lz4"}},
		{"--out d --format feather", []string{"-format", "parquet, arrow"}},
		{"--out d --tokens 5", []string{"-tokens", "MIN:MAX"}},
		{"--out d --tokens 9:3", []string{"-tokens", "MIN:MAX"}},
		{"--out d --tokens -1:3", []string{"-tokens", "MIN:MAX"}},
		{"--out d --tokens a:b", []string{"-tokens", "MIN:MAX"}},
		{"--out d --image 32x32", []string{"-image", "HxWxC"}},
		{"--out d --image 32x0x3", []string{"-image", "HxWxC"}},
		{"--out d --image 3,3,3", []string{"-image", "HxWxC"}},
		{"--out d --rows abc", []string{"-rows", "abc"}},
		{"--out d --seed -1", []string{"-seed"}},
		{"--out d --bogus", []string{"-bogus"}},
		{"--out d extra", []string{"unexpected arguments", "extra"}},
		{"--out d --rows 0", []string{"rows = 0"}},
		{"--out d --files 0", []string{"files = 0"}},
		{"--out d --row-group-rows 0", []string{"row group rows = 0"}},
		{"--out d --features -1", []string{"features = -1"}},
		{"--out d --format arrow --compression snappy", []string{"snappy", "Arrow IPC", "none, zstd or lz4"}},
		{"--out d --format arrow --dictionary", []string{"dictionary"}},
	} {
		_, err := parseGenArgs(strings.Fields(tc.args), io.Discard)
		if err == nil {
			t.Errorf("parseGenArgs(%q) = nil error, want one mentioning %q", tc.args, tc.want)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("parseGenArgs(%q) = %q, want it to mention %q", tc.args, err, w)
			}
		}
	}
}

func TestParseGenArgsHelp(t *testing.T) {
	for _, h := range []string{"-h", "--help"} {
		var buf bytes.Buffer
		_, err := parseGenArgs([]string{h}, &buf)
		if !errors.Is(err, flag.ErrHelp) {
			t.Errorf("parseGenArgs(%q) = %v, want flag.ErrHelp", h, err)
		}
		for _, w := range []string{"usage: meshfeed gen", "-compression", "-if-absent", "-row-group-rows"} {
			if !strings.Contains(buf.String(), w) {
				t.Errorf("parseGenArgs(%q) usage lacks %q:\n%s", h, w, buf.String())
			}
		}
	}
}

// TestRunGenGCS writes a dataset to the in-process GCS emulator and reads it
// back through the loader.
func TestRunGenGCS(t *testing.T) {
	fake := objstoretest.NewFakeGCS(t, "bucket")
	t.Setenv("STORAGE_EMULATOR_HOST", fake.URL)
	genCaptureStdout(t)
	ctx := context.Background()
	args := []string{"--out", "gs://bucket/ds", "--rows", "1000", "--files", "2", "--row-group-rows", "300", "--features", "8"}
	if err := runGen(ctx, args); err != nil {
		t.Fatal(err)
	}
	store := fake.Store(t)
	ds, err := loader.Open(ctx, store, []string{"gs://bucket/ds/*.parquet"})
	if err != nil {
		t.Fatal(err)
	}
	if ds.NumRows() != 1000 || len(ds.Files) != 2 {
		t.Errorf("read back %d rows in %d files, want 1000 in 2", ds.NumRows(), len(ds.Files))
	}
	out := genCaptureStdout(t)
	if err := runGen(ctx, append(args, "--if-absent")); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "nothing written") {
		t.Errorf("second gen --if-absent printed %q, want nothing written", out.String())
	}
}

func TestRunGenOutURIs(t *testing.T) {
	for _, tc := range []struct{ out, want string }{
		{"ftp://bucket/prefix", `unsupported scheme "ftp"`},
	} {
		err := runGen(context.Background(), []string{"--out", tc.out})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("runGen(--out %q) = %v, want %q", tc.out, err, tc.want)
		}
	}
}

func genCaptureStdout(t *testing.T) *bytes.Buffer {
	var buf bytes.Buffer
	old := genStdout
	genStdout = &buf
	t.Cleanup(func() { genStdout = old })
	return &buf
}

func genModTimes(t *testing.T, dir string) map[string]int64 {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = info.ModTime().UnixNano()
	}
	return out
}

func TestRunGenIfAbsent(t *testing.T) {
	out := genCaptureStdout(t)
	dir := filepath.Join(t.TempDir(), "ds")
	args := []string{"--out", dir, "--rows", "100", "--files", "3", "--row-group-rows", "16", "--features", "4", "--if-absent"}
	if err := runGen(context.Background(), args); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "wrote 3 files, 100 rows") {
		t.Errorf("first run printed %q, want a summary of 3 files, 100 rows", out)
	}
	before := genModTimes(t, dir)
	want := []string{"_meshfeed_gen.json", "part-00000.parquet", "part-00001.parquet", "part-00002.parquet"}
	if len(before) != len(want) {
		t.Fatalf("dir holds %v, want %v", before, want)
	}
	for _, n := range want {
		if _, ok := before[n]; !ok {
			t.Errorf("dir lacks %s: %v", n, before)
		}
	}

	// Same parameters: nothing is written.
	out.Reset()
	if err := runGen(context.Background(), args); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "already holds this dataset") {
		t.Errorf("second run printed %q, want it to skip", out)
	}
	if after := genModTimes(t, dir); len(after) != len(before) || after["part-00000.parquet"] != before["part-00000.parquet"] {
		t.Errorf("second run touched the files: %v -> %v", before, after)
	}

	// A truncated file: regenerated.
	if err := os.Truncate(filepath.Join(dir, "part-00001.parquet"), 10); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := runGen(context.Background(), args); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "regenerating") || !strings.Contains(out.String(), "wrote 3 files") {
		t.Errorf("run after truncation printed %q, want it to regenerate", out)
	}

	// Fewer files and another seed: regenerated, stale part-00002 removed.
	args2 := []string{"--out", dir, "--rows", "100", "--files", "2", "--row-group-rows", "16", "--features", "4", "--seed", "3", "--if-absent"}
	out.Reset()
	if err := runGen(context.Background(), args2); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "parameters differ") || !strings.Contains(out.String(), "removed stale") {
		t.Errorf("run with new parameters printed %q, want regenerate and remove a stale file", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "part-00002.parquet")); !os.IsNotExist(err) {
		t.Errorf("stale part-00002.parquet still there: %v", err)
	}
	if got := len(genModTimes(t, dir)); got != 3 {
		t.Errorf("dir holds %d entries, want 2 files and the manifest", got)
	}

	// Without --if-absent the same dataset is written again.
	out.Reset()
	if err := runGen(context.Background(), args2[:len(args2)-1]); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "wrote 2 files") {
		t.Errorf("run without --if-absent printed %q, want it to write", out)
	}
}
