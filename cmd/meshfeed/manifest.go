package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/manifest"
	"github.com/meshfeed/meshfeed/objstore"
)

const manifestUsage = `usage: meshfeed manifest [--out URI] [--shard i/n] [--filters JSON ...] URI...
       meshfeed manifest merge --out URI PART...

Writes the manifest of the dataset the URIs (files, directories or globs,
local or gs://) name: every file's identity and the facts planning reads
from its footer, so that each host reads one object at job start instead of
every footer. Default --out: _meshfeed_manifest.parquet in the dataset's
directory (where the Loader and meshfeed plan look for it).

With --shard i/n this process reads only every n-th file from the i-th on
and writes a part (default --out: _meshfeed_manifest.part-i-of-n.parquet in
the dataset's directory); "meshfeed manifest merge --out URI PART..." joins
the n parts into the manifest a single process would have written.

Each --filters (pyarrow.parquet's filters in JSON, as meshfeed plan takes
them; repeatable) is evaluated once on every file and its selections stored
in the manifest, so that a request with that filter plans from the manifest
without reading the filter columns.
`

// runManifest writes a manifest, a part of one, or merges parts.
func runManifest(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "merge" {
		return runManifestMerge(ctx, args[1:])
	}
	fs := flag.NewFlagSet("manifest", flag.ContinueOnError)
	out := fs.String("out", "", "where to write the manifest (default: beside the data)")
	shardSpec := fs.String("shard", "", "i/n: build part i of n (0 <= i < n)")
	var filters []string
	fs.Func("filters", "a filter (JSON) whose selections to store; repeatable", filterFlag(&filters))
	fs.Usage = func() { fmt.Fprint(fs.Output(), manifestUsage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return fmt.Errorf("no dataset URI given")
	}
	shard, of := 0, 0
	if *shardSpec != "" {
		var err error
		if shard, of, err = parseShard(*shardSpec); err != nil {
			return err
		}
	}
	uri, err := manifestOut(*out, fs.Args())
	if err != nil {
		return err
	}
	if *out == "" && of > 0 {
		uri = strings.TrimSuffix(uri, ".parquet") + fmt.Sprintf(".part-%d-of-%d.parquet", shard, of)
	}
	store, err := objstore.NewStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	start := time.Now()
	m, err := loader.BuildManifest(ctx, store, fs.Args(), shard, of)
	if err != nil {
		return err
	}
	if err := storeSelections(ctx, store, fs.Args(), m, filters); err != nil {
		return err
	}
	if err := manifest.Write(ctx, store, uri, m); err != nil {
		return err
	}
	fmt.Printf("wrote %s: %d files, %d schemas, in %.2fs\n", uri, len(m.Files), len(m.Schemas), time.Since(start).Seconds())
	return nil
}

// runManifestMerge joins the parts of a sharded build.
func runManifestMerge(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("manifest merge", flag.ContinueOnError)
	out := fs.String("out", "", "where to write the merged manifest (required)")
	fs.Usage = func() { fmt.Fprint(fs.Output(), manifestUsage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() == 0 {
		fs.Usage()
		return fmt.Errorf("merge needs --out and the parts")
	}
	store, err := objstore.NewStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	var parts []*manifest.Manifest
	for _, p := range fs.Args() {
		m, err := manifest.Read(ctx, store, p)
		if err != nil {
			return err
		}
		parts = append(parts, m)
	}
	m, err := manifest.Merge(parts)
	if err != nil {
		return err
	}
	if err := manifest.Write(ctx, store, *out, m); err != nil {
		return err
	}
	fmt.Printf("wrote %s: %d files, %d schemas, from %d parts\n", *out, len(m.Files), len(m.Schemas), len(parts))
	return nil
}

// manifestOut returns out, or when it is empty the manifest's default
// place beside the dataset the URIs name.
func manifestOut(out string, uris []string) (string, error) {
	if out != "" {
		return out, nil
	}
	def, err := loader.DefaultManifestURI(uris)
	if err != nil {
		return "", fmt.Errorf("%w; give --out", err)
	}
	return def, nil
}

// parseShard parses "i/n".
func parseShard(s string) (int, int, error) {
	a, b, ok := strings.Cut(s, "/")
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || n < 1 || i < 0 || i >= n {
		return 0, 0, fmt.Errorf("--shard %q: want i/n with 0 <= i < n, such as 0/4", s)
	}
	return i, n, nil
}

// manifestOption is the loader option of a --manifest flag: "auto", "off"
// (read the footers) or the manifest's URI.
func manifestOption(flagValue string) loader.Option {
	if flagValue == "off" {
		return loader.WithManifest("")
	}
	return loader.WithManifest(flagValue)
}
