package main

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/meshfeed/meshfeed/internal/datagen"
)

// runGenText writes a text dataset (id, text) for tokenizer tests and
// benchmarks: documents cut from a tree of real text (--source, for example
// the Python standard library) mixed with other scripts, emoji, combining
// marks and unusual whitespace; see datagen.TextSpec.
func runGenText(ctx context.Context, args []string) error {
	s := datagen.DefaultTextSpec()
	fs := flag.NewFlagSet("gen-text", flag.ContinueOnError)
	out := fs.String("out", "", "output directory, a local path (required)")
	source := fs.String("source", "", `directory of .py/.txt/.rst/.md files to cut documents from (required), e.g. $(python3 -c "import sysconfig; print(sysconfig.get_paths()['stdlib'])")`)
	fs.Int64Var(&s.Docs, "docs", s.Docs, "documents (rows)")
	fs.IntVar(&s.Files, "files", s.Files, "Parquet files")
	fs.Int64Var(&s.RowGroupRows, "row-group-rows", s.RowGroupRows, "rows per row group")
	fs.IntVar(&s.MinChars, "min-chars", s.MinChars, "shortest document, in characters")
	fs.IntVar(&s.MaxChars, "max-chars", s.MaxChars, "longest document, in characters")
	fs.Uint64Var(&s.Seed, "seed", s.Seed, "seed of the documents")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: meshfeed gen-text --out DIR --source DIR [--docs N] [--files N] [--row-group-rows N] [--min-chars N] [--max-chars N] [--seed S]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *source == "" || fs.NArg() != 0 {
		fs.Usage()
		return fmt.Errorf("gen-text: --out and --source are required, and nothing else")
	}
	if strings.Contains(*out, "://") {
		return fmt.Errorf("gen-text: --out %s: only local directories (copy the files to a bucket afterwards)", *out)
	}
	src, err := datagen.LoadTextSource(*source)
	if err != nil {
		return err
	}
	files, err := datagen.WriteText(ctx, datagen.LocalCreator{}, filepath.Clean(*out), s, src)
	if err != nil {
		return err
	}
	var bytes int64
	for _, f := range files {
		bytes += f.Bytes
	}
	fmt.Fprintf(genStdout, "wrote %d documents in %d files (%d bytes) to %s\n", s.Docs, len(files), bytes, *out)
	return nil
}
