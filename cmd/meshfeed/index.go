package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/meshfeed/meshfeed/feed"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/manifest"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/tokcount"
)

const indexUsage = `usage: meshfeed index --tokenizer F --column C [--add-special-tokens=false] [--out MANIFEST] URI...

Builds the token-count index of a text column: the tokens of every row
under the tokenizer F (as Column(tokenizer=F) encodes them), stored in the
dataset's manifest as a per-file fact (kind token-count/v1, keyed by the
tokenizer file's SHA-256, the column and add_special_tokens), so that a
request packing the column by concatenation (pack "concat") plans its
steps from the manifest without tokenizing. The manifest at --out (default:
_meshfeed_manifest.parquet in the dataset's directory) is updated when it
exists and written when it does not.
`

// runIndex tokenizes a column once and stores its token counts in the
// dataset's manifest.
func runIndex(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("index", flag.ContinueOnError)
	tokPath := fs.String("tokenizer", "", "tokenizer.json: a local path or an object URI (required)")
	column := fs.String("column", "", "string or large_string column (required)")
	addSpecial := fs.Bool("add-special-tokens", true, "count the post-processor's special tokens, as the column's add_special_tokens does")
	out := fs.String("out", "", "the manifest to update or write (default: beside the data)")
	fs.Usage = func() { fmt.Fprint(fs.Output(), indexUsage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tokPath == "" || *column == "" || fs.NArg() == 0 {
		fs.Usage()
		return fmt.Errorf("index: --tokenizer, --column and at least one dataset URI are required")
	}
	uri, err := manifestOut(*out, fs.Args())
	if err != nil {
		return err
	}
	store, tok, err := openTokenizer(ctx, *tokPath)
	if err != nil {
		return err
	}
	defer store.Close()
	start := time.Now()
	m, err := manifest.Read(ctx, store, uri)
	if errors.Is(err, objstore.ErrNotFound) {
		m, err = loader.BuildManifest(ctx, store, fs.Args(), 0, 0)
	}
	if err != nil {
		return err
	}
	key := tokcount.Key{Tokenizer: tok.Hash(), Column: *column, AddSpecial: *addSpecial}
	var rows, tokens int64
	err = withListedFiles(ctx, store, fs.Args(), m, "tokens were counted", func(files []objstore.Object) error {
		ds, err := loader.OpenObjects(ctx, store, files, loader.WithColumns(*column), loader.WithNullsAsValidity())
		if err != nil {
			return err
		}
		counts, err := feed.TokenCounts(ctx, ds, tok, *column, *addSpecial)
		if err != nil {
			return err
		}
		for i, c := range counts {
			if err := m.PutFact(ds.Files[i].Object, tokcount.FactKind, key.String(), tokcount.Encode(c)); err != nil {
				return err
			}
			for _, rg := range c.RowGroups {
				rows += int64(len(rg))
			}
			tokens += c.Tokens()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("index: %w", err)
	}
	if err := manifest.Write(ctx, store, uri, m); err != nil {
		return err
	}
	fmt.Printf("wrote %s: token counts of column %q (tokenizer %s, add_special_tokens %v) for %d files, %d rows, %d tokens, in %.2fs\n",
		uri, *column, tok.Hash(), *addSpecial, len(m.Files), rows, tokens, time.Since(start).Seconds())
	return nil
}
