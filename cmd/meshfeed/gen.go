package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/objstore"
)

// genStdout is where gen reports what it wrote (a variable for tests).
var genStdout io.Writer = os.Stdout

// genManifestName is the file gen writes beside a dataset, last, describing it;
// --if-absent compares against it.
const genManifestName = "_meshfeed_gen.json"

// genManifestVersion changes when the meaning of a manifest or of the values
// datagen generates from a Spec changes, so old datasets are regenerated.
const genManifestVersion = 1

// genManifest is the content of _meshfeed_gen.json.
type genManifest struct {
	Version int          `json:"version"`
	Spec    datagen.Spec `json:"spec"`
	Files   []genFile    `json:"files"`
	Rows    int64        `json:"rows"`
	Bytes   int64        `json:"bytes"`
}

type genFile struct {
	Name  string `json:"name"`
	Rows  int64  `json:"rows"`
	Bytes int64  `json:"bytes"`
}

// genArgs is the parsed command line of gen.
type genArgs struct {
	out      string
	spec     datagen.Spec
	ifAbsent bool
}

// parseGenArgs parses gen's flags. Errors are returned, not printed; on -h it
// writes the usage to w and returns flag.ErrHelp.
func parseGenArgs(args []string, w io.Writer) (genArgs, error) {
	var g genArgs
	g.spec = datagen.DefaultSpec()
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&g.out, "out", "", "output directory: a local path, gs://bucket/prefix or s3://bucket/prefix (required)")
	fs.Int64Var(&g.spec.Rows, "rows", g.spec.Rows, "total rows (at least --files)")
	fs.IntVar(&g.spec.Files, "files", g.spec.Files, "number of files; rows are spread evenly")
	fs.Int64Var(&g.spec.RowGroupRows, "row-group-rows", g.spec.RowGroupRows, "rows per Parquet row group (Arrow: per record batch)")
	fs.IntVar(&g.spec.Features, "features", g.spec.Features, "length of the features fixed_size_list<float32>; 0 omits it")
	fs.Uint64Var(&g.spec.Seed, "seed", g.spec.Seed, "seed of the values")
	fs.BoolVar(&g.spec.Dictionary, "dictionary", false, "Parquet dictionary encoding for every column")
	fs.Int64Var(&g.spec.PageBytes, "page-bytes", 0, "Parquet data page size in bytes (0: the writer's default, 1 MiB)")
	fs.BoolVar(&g.spec.PageIndex, "page-index", false, "write the Parquet page index (offset and column indexes)")
	fs.BoolVar(&g.ifAbsent, "if-absent", false, "do nothing if the directory already holds this dataset (per "+genManifestName+")")
	fs.Func("compression", "codec: none, snappy, zstd, gzip or lz4 (Parquet LZ4_RAW, Arrow LZ4_FRAME); Arrow takes none, zstd, lz4 (default none)", func(s string) error {
		c, err := datagen.ParseCompression(s)
		g.spec.Compression = c
		return err
	})
	fs.Func("format", "file format: parquet or arrow (default parquet)", func(s string) error {
		f, err := datagen.ParseFormat(s)
		g.spec.Format = f
		return err
	})
	fs.Func("tokens", "add a tokens list<int32> column with lengths MIN:MAX (inclusive)", func(s string) error {
		lo, hi, ok := strings.Cut(s, ":")
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if !ok || err1 != nil || err2 != nil || a < 0 || b < a {
			return fmt.Errorf("want MIN:MAX with 0 <= MIN <= MAX, e.g. 16:512")
		}
		g.spec.Tokens, g.spec.TokensMin, g.spec.TokensMax = true, a, b
		return nil
	})
	fs.Func("image", "add an image column, arrow.fixed_shape_tensor<uint8> of shape HxWxC, e.g. 32x32x3", func(s string) error {
		parts := strings.Split(s, "x")
		if len(parts) != 3 {
			return fmt.Errorf("want HxWxC with positive integers, e.g. 32x32x3")
		}
		for i, p := range parts {
			v, err := strconv.Atoi(p)
			if err != nil || v < 1 {
				return fmt.Errorf("want HxWxC with positive integers, e.g. 32x32x3")
			}
			g.spec.Image[i] = v
		}
		return nil
	})
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(w, "usage: meshfeed gen --out DIR|gs://BUCKET/PREFIX|s3://BUCKET/PREFIX [flags]\n\n"+
				"Writes a synthetic dataset part-00000.<format> ... whose values are a pure\n"+
				"function of (seed, row id); see internal/datagen.\n\nflags:")
			fs.SetOutput(w)
			fs.PrintDefaults()
		}
		return g, err
	}
	if fs.NArg() > 0 {
		return g, fmt.Errorf("unexpected arguments %q (all options are flags)", fs.Args())
	}
	if g.out == "" {
		return g, errors.New("--out is required")
	}
	if err := g.spec.Validate(); err != nil {
		return g, err
	}
	return g, nil
}

// genLocalDir returns the local path of out, or an error for a URI gen cannot
// write yet.
func genLocalDir(out string) (string, error) {
	scheme, rest, ok := strings.Cut(out, "://")
	switch {
	case !ok:
		return out, nil
	case scheme == "file":
		return rest, nil
	case scheme == "gs" || scheme == "s3", slices.Contains(objstore.AzureSchemes, scheme):
		return "", errGenGCS
	default:
		return "", fmt.Errorf("--out %q: unsupported scheme %q (want a local path, gs://, s3:// or az://)", out, scheme)
	}
}

// genPartName matches the files datagen writes, so gen can remove stale ones.
var genPartName = regexp.MustCompile(`^part-[0-9]{5}\.(parquet|arrow)$`)

// errGenGCS marks a gs:// or s3:// output, written through the loader's store.
var errGenGCS = errors.New("object store output")

func runGen(ctx context.Context, args []string) error {
	g, err := parseGenArgs(args, os.Stderr)
	if err != nil {
		return err
	}
	dir, err := genLocalDir(g.out)
	if errors.Is(err, errGenGCS) {
		return runGenGCS(ctx, g)
	}
	if err != nil {
		return err
	}
	manifestPath := filepath.Join(dir, genManifestName)
	if g.ifAbsent {
		if same, why := genSameDataset(dir, manifestPath, g.spec); same {
			fmt.Fprintf(genStdout, "%s already holds this dataset (%s); nothing written\n", dir, genManifestName)
			return nil
		} else if why != "" {
			fmt.Fprintf(genStdout, "regenerating %s: %s\n", dir, why)
		}
	}
	plan, err := g.spec.Plan()
	if err != nil {
		return err
	}
	// The manifest goes first and comes back last, so an interrupted run is
	// never taken for a complete dataset; part files of an earlier, larger
	// dataset would be read as part of this one, so they go too.
	if err := genRemoveIfExists(manifestPath); err != nil {
		return err
	}
	if err := genRemoveStaleParts(dir, plan); err != nil {
		return err
	}
	res, err := datagen.Write(ctx, datagen.LocalCreator{}, dir, g.spec)
	if err != nil {
		return err
	}
	if err := genWriteManifest(ctx, datagen.LocalCreator{}, manifestPath, g.spec, res); err != nil {
		return err
	}
	secs := res.Elapsed.Seconds()
	fmt.Fprintf(genStdout, "wrote %d files, %d rows, %d bytes (%.1f MB) in %.2fs (%.0f MB/s) to %s\n",
		len(res.Files), res.Rows, res.Bytes, float64(res.Bytes)/1e6, secs, float64(res.Bytes)/1e6/max(secs, 1e-9), dir)
	return nil
}

// genSameDataset reports whether dir holds the dataset of spec according to its
// manifest, with every listed file present at its recorded size. When it does
// not, why says what differs ("" when there is no manifest).
func genSameDataset(dir, manifestPath string, spec datagen.Spec) (same bool, why string) {
	b, err := os.ReadFile(manifestPath)
	if errors.Is(err, os.ErrNotExist) {
		return false, ""
	}
	if err != nil {
		return false, err.Error()
	}
	var m genManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return false, fmt.Sprintf("unreadable %s: %v", genManifestName, err)
	}
	if m.Version != genManifestVersion {
		return false, fmt.Sprintf("%s version %d, want %d", genManifestName, m.Version, genManifestVersion)
	}
	if m.Spec.Canonical() != spec.Canonical() {
		old, _ := json.Marshal(m.Spec.Canonical())
		return false, fmt.Sprintf("parameters differ: was %s", old)
	}
	for _, f := range m.Files {
		st, err := os.Stat(filepath.Join(dir, f.Name))
		if err != nil {
			return false, err.Error()
		}
		if st.Size() != f.Bytes {
			return false, fmt.Sprintf("%s has %d bytes, manifest says %d", f.Name, st.Size(), f.Bytes)
		}
	}
	return true, ""
}

func genRemoveIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// genRemoveStaleParts removes part-NNNNN.{parquet,arrow} files in dir that plan
// does not name.
func genRemoveStaleParts(dir string, plan []datagen.FilePlan) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, fp := range plan {
		keep[fp.Name] = true
	}
	for _, e := range entries {
		if e.Type().IsRegular() && genPartName.MatchString(e.Name()) && !keep[e.Name()] {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
			fmt.Fprintf(genStdout, "removed stale %s\n", filepath.Join(dir, e.Name()))
		}
	}
	return nil
}

// runGenGCS writes the dataset to gs://bucket/prefix or s3://bucket/prefix
// through the loader's store (STORAGE_EMULATOR_HOST, AWS_ENDPOINT_URL point
// it at an emulator). --if-absent skips
// when the manifest object already describes the same dataset.
func runGenGCS(ctx context.Context, g genArgs) error {
	store, err := objstore.NewStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	out := strings.TrimSuffix(g.out, "/")
	manifestURI := out + "/" + genManifestName
	if g.ifAbsent {
		if obj, err := store.Stat(ctx, manifestURI); err == nil {
			buf := make([]byte, obj.Size)
			if err := store.ReadAt(ctx, obj, buf, 0); err == nil {
				var m genManifest
				if json.Unmarshal(buf, &m) == nil && m.Version == genManifestVersion && m.Spec == g.spec.Canonical() {
					fmt.Fprintf(genStdout, "%s already holds this dataset (%s); nothing written\n", out, genManifestName)
					return nil
				}
			}
		}
	}
	res, err := datagen.Write(ctx, store, out, g.spec)
	if err != nil {
		return err
	}
	if err := genWriteManifest(ctx, store, manifestURI, g.spec, res); err != nil {
		return err
	}
	fmt.Fprintf(genStdout, "wrote %d files, %d rows, %d bytes (%.1f MB) in %.2fs to %s\n",
		len(res.Files), res.Rows, res.Bytes, float64(res.Bytes)/1e6, res.Elapsed.Seconds(), out)
	return nil
}

// genWriteManifest prints what was written and writes the manifest last, so a
// dataset without one is known to be incomplete.
func genWriteManifest(ctx context.Context, c datagen.Creator, uri string, spec datagen.Spec, res datagen.Result) error {
	m := genManifest{Version: genManifestVersion, Spec: spec.Canonical(), Rows: res.Rows, Bytes: res.Bytes}
	for _, f := range res.Files {
		m.Files = append(m.Files, genFile{Name: path.Base(f.URI), Rows: f.Rows, Bytes: f.Bytes})
		fmt.Fprintf(genStdout, "  %s  %d rows  %d row groups  %d bytes\n", f.URI, f.Rows, len(f.RowGroups), f.Bytes)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	w, err := c.Create(ctx, uri)
	if err != nil {
		return err
	}
	if _, err := w.Write(append(b, '\n')); err != nil {
		if a, ok := w.(interface{ Abort() error }); ok {
			a.Abort()
		} else {
			w.Close()
		}
		return fmt.Errorf("write %s: %w", uri, err)
	}
	return w.Close()
}
