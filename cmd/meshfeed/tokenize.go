package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/tokenize"
)

var tokenizeStdout io.Writer = os.Stdout

// runTokenize prints the token ids of every row of a text column, in dataset
// order, so that a user can compare meshfeed with the tokenizer they trust.
func runTokenize(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("tokenize", flag.ContinueOnError)
	tokPath := fs.String("tokenizer", "", "tokenizer.json: a local path or an object URI (required)")
	column := fs.String("column", "", "string or large_string column to tokenize (required)")
	asJSON := fs.Bool("json", false, `print JSON lines {"row": i, "ids": [...]} (default: "row<TAB>id id ...")`)
	noSpecial := fs.Bool("no-special-tokens", false, "do not add the post-processor's special tokens (add_special_tokens=False)")
	workers := fs.Int("workers", runtime.GOMAXPROCS(0), "goroutines encoding at once")
	summary := fs.Bool("summary", false, `read all rows first, then encode them and print only one JSON line: rows, tokens, text bytes, and the wall and CPU seconds spent encoding (for benchmarks)`)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: meshfeed tokenize --tokenizer F --column C [--json] [--no-special-tokens] URI...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tokPath == "" || *column == "" || fs.NArg() == 0 {
		fs.Usage()
		return fmt.Errorf("tokenize: --tokenizer, --column and at least one dataset URI are required")
	}
	store, tok, err := openTokenizer(ctx, *tokPath)
	if err != nil {
		return err
	}
	defer store.Close()
	ds, err := loader.Open(ctx, store, fs.Args(), loader.WithColumns(*column))
	if err != nil {
		return err
	}
	if id := ds.Schema.Field(0).Type.ID(); id != arrow.STRING && id != arrow.LARGE_STRING {
		return fmt.Errorf("tokenize: column %q of %s is %s, not string or large_string: a tokenizer reads text",
			*column, ds.Files[0].Object.URI, ds.Schema.Field(0).Type)
	}
	out := bufio.NewWriterSize(tokenizeStdout, 1<<20)
	o := tokenizeOptions{column: *column, json: *asJSON, special: !*noSpecial, summary: *summary, workers: *workers}
	if *summary {
		sum, err := summarizeTokenize(ctx, ds, tok, o)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, `{"rows": %d, "tokens": %d, "text_bytes": %d, "encode_seconds": %.6f, "encode_cpu_seconds": %.6f, "workers": %d}`+"\n",
			sum.rows, sum.tokens, sum.textBytes, sum.encode.Seconds(), sum.cpu.Seconds(), *workers)
		return out.Flush()
	}
	if _, err := tokenizeRows(ctx, ds, tok, o, out); err != nil {
		return err
	}
	return out.Flush()
}

type tokenizeOptions struct {
	column                 string
	json, special, summary bool
	workers                int
}

type tokenizeSummary struct {
	rows, tokens, textBytes int64
	encode, cpu             time.Duration
}

// summarizeTokenize reads every row group first, then encodes them all,
// timing the encoding alone: wall time and the process's CPU time (which
// a loaded machine disturbs less).
func summarizeTokenize(ctx context.Context, ds *loader.Dataset, tok *tokenize.Tokenizer, o tokenizeOptions) (tokenizeSummary, error) {
	var sum tokenizeSummary
	r := ds.NewReader(ctx, ds.RowGroups(), memory.DefaultAllocator)
	var recs []arrow.RecordBatch
	defer func() {
		for _, rec := range recs {
			rec.Release()
		}
	}()
	for {
		rec, ref, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			r.Close()
			return sum, err
		}
		recs = append(recs, rec)
		col := rec.Column(0)
		if err := checkText(col, stringValues(col), ds.Files[ref.File].Object.URI, ref.Index, sum.rows, o.column); err != nil {
			r.Close()
			return sum, err
		}
		sum.rows += int64(col.Len())
	}
	r.Close()
	var values []int32
	var offsets []int64
	cpu0, t0 := cpuTime(), time.Now()
	for _, rec := range recs {
		col := rec.Column(0)
		text := stringValues(col)
		var err error
		values, offsets, err = tok.EncodeBatch(values[:0], append(offsets[:0], 0), col.Len(), o.workers, o.special, text)
		if err != nil {
			return sum, err
		}
		sum.tokens += int64(len(values))
	}
	sum.encode, sum.cpu = time.Since(t0), cpuTime()-cpu0
	for _, rec := range recs {
		col := rec.Column(0)
		text := stringValues(col)
		for i := range col.Len() {
			sum.textBytes += int64(len(text(i)))
		}
	}
	return sum, nil
}

// cpuTime is the user and system CPU time of the process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// tokenizeRows encodes every row group in order and writes each row's ids to out.
func tokenizeRows(ctx context.Context, ds *loader.Dataset, tok *tokenize.Tokenizer, o tokenizeOptions, out io.Writer) (tokenizeSummary, error) {
	var sum tokenizeSummary
	r := ds.NewReader(ctx, ds.RowGroups(), memory.DefaultAllocator)
	defer r.Close()
	var values []int32
	var offsets []int64
	var line []byte
	for {
		rec, ref, err := r.Next()
		if errors.Is(err, io.EOF) {
			return sum, nil
		}
		if err != nil {
			return sum, err
		}
		err = func() error {
			defer rec.Release()
			col := rec.Column(0)
			text := stringValues(col)
			n := col.Len()
			if err := checkText(col, text, ds.Files[ref.File].Object.URI, ref.Index, sum.rows, o.column); err != nil {
				return err
			}
			values, offsets, err = tok.EncodeBatch(values[:0], append(offsets[:0], 0), n, o.workers, o.special, text)
			if err != nil {
				return err
			}
			for i := range n {
				line = appendRow(line[:0], sum.rows+int64(i), values[offsets[i]:offsets[i+1]], o.json)
				if _, err := out.Write(line); err != nil {
					return err
				}
			}
			sum.rows += int64(n)
			return nil
		}()
		if err != nil {
			return sum, err
		}
	}
}

// maxTokenizerBytes bounds a tokenizer.json read into memory (the largest
// public vocabularies are tens of MB).
const maxTokenizerBytes = 1 << 30

// openTokenizer opens the object store and reads the tokenizer.json at uri
// through it (tokenize and index both do); the caller closes the store.
func openTokenizer(ctx context.Context, uri string) (*objstore.Mux, *tokenize.Tokenizer, error) {
	store, err := objstore.NewStore(ctx)
	if err != nil {
		return nil, nil, err
	}
	tok, err := readTokenizer(ctx, store, uri)
	if err != nil {
		store.Close()
		return nil, nil, err
	}
	return store, tok, nil
}

// readTokenizer reads a tokenizer.json through the store (any scheme it serves).
func readTokenizer(ctx context.Context, store objstore.Store, uri string) (*tokenize.Tokenizer, error) {
	if !strings.Contains(uri, "://") {
		abs, err := filepath.Abs(uri)
		if err != nil {
			return nil, fmt.Errorf("tokenize: --tokenizer %s: %w", uri, err)
		}
		uri = abs
	}
	obj, err := store.Stat(ctx, uri)
	if err != nil {
		return nil, fmt.Errorf("tokenize: --tokenizer: %w", err)
	}
	if obj.Size > maxTokenizerBytes {
		return nil, fmt.Errorf("tokenize: --tokenizer %s: %d bytes, more than the %d a tokenizer.json may have", uri, obj.Size, int64(maxTokenizerBytes))
	}
	data := make([]byte, obj.Size)
	if err := store.ReadAt(ctx, obj, data, 0); err != nil {
		return nil, fmt.Errorf("tokenize: --tokenizer: %w", err)
	}
	return tokenize.Parse(uri, data)
}

// stringValues returns row i of a string or large_string array ("" for null).
func stringValues(col arrow.Array) func(i int) string {
	switch a := col.(type) {
	case *array.String:
		return a.Value
	case *array.LargeString:
		return a.Value
	}
	return func(int) string { return "" }
}

// checkText refuses a null row or one that is not valid UTF-8, naming where
// it is: the reference library cannot be given either (None is not text, and
// Python cannot decode invalid UTF-8).
func checkText(col arrow.Array, text func(int) string, uri string, rg int, first int64, column string) error {
	for i := range col.Len() {
		if col.IsNull(i) {
			return fmt.Errorf("tokenize: %s row group %d: column %q row %d (dataset row %d) is null: there is no text to tokenize; filter nulls out or fill them",
				uri, rg, column, i, first+int64(i))
		}
		s := text(i)
		if utf8.ValidString(s) {
			continue
		}
		at := 0
		for at < len(s) {
			r, w := utf8.DecodeRuneInString(s[at:])
			if r == utf8.RuneError && w == 1 {
				break
			}
			at += w
		}
		return fmt.Errorf("tokenize: %s row group %d: column %q row %d (dataset row %d): byte %d: %w; fix or drop the row (pyarrow's to_pylist and the tokenizers library refuse it too)",
			uri, rg, column, i, first+int64(i), at, tokenize.ErrInvalidUTF8)
	}
	return nil
}

func appendRow(b []byte, row int64, ids []int32, asJSON bool) []byte {
	if asJSON {
		b = append(b, `{"row": `...)
		b = strconv.AppendInt(b, row, 10)
		b = append(b, `, "ids": [`...)
		for k, id := range ids {
			if k > 0 {
				b = append(b, ", "...)
			}
			b = strconv.AppendInt(b, int64(id), 10)
		}
		return append(b, "]}\n"...)
	}
	b = strconv.AppendInt(b, row, 10)
	b = append(b, '\t')
	for k, id := range ids {
		if k > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendInt(b, int64(id), 10)
	}
	return append(b, '\n')
}
