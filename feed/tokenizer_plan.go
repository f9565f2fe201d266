package feed

import (
	"context"
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"

	"github.com/meshfeed/meshfeed/batching"
	"github.com/meshfeed/meshfeed/filter"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/tokenize"
	"github.com/meshfeed/meshfeed/transport"
)

// Tokenized columns (DESIGN.md, "Tokenization"): a column requested with a
// tokenizer is checked and its tokenizer read when the request is planned;
// the stream's readers tokenize each decoded row group or piece right after
// decoding it (and after taking the rows a filter keeps, so that dropped
// rows are never tokenized), on the readers' decode slots
// (loader.WithReaderTransform), and the column goes on as list<int32> into
// cutting and list shaping.

func init() {
	errorCodes = append(errorCodes,
		transport.ErrorCode{Target: tokenize.ErrMalformed, Code: codes.InvalidArgument},
		transport.ErrorCode{Target: tokenize.ErrUnsupported, Code: codes.InvalidArgument},
		transport.ErrorCode{Target: tokenize.ErrInvalidUTF8, Code: codes.FailedPrecondition},
	)
}

// tokColumn is a column of a request with a tokenizer.
type tokColumn struct {
	name, uri  string
	addSpecial bool
}

// planTok is a tokenized column of a plan.
type planTok struct {
	tokColumn
	col int    // the column's index in the decoded schema
	sum string // SHA-256 of the tokenizer.json
	tok *tokenize.Tokenizer
	// specials is the most ids the post-processor adds to a row.
	specials int
}

// planTokenizers reads the tokenizer of every column of cols and checks
// that the column is text in ds; it returns them and the schema of ds's
// records once tokenized (each such column list<int32>). Errors name the
// column, the tokenizer or the file, and what to do.
func (p *Pipeline) planTokenizers(ctx context.Context, cols []tokColumn, ds *loader.Dataset) ([]planTok, *arrow.Schema, error) {
	if len(cols) == 0 {
		return nil, ds.Schema, nil
	}
	fields := ds.Schema.Fields()
	var out []planTok
	for _, c := range cols {
		j := ds.Schema.FieldIndices(c.name)
		if len(j) == 0 {
			return nil, nil, fmt.Errorf("feed: %w: column %q: no such column to tokenize", loader.ErrColumnNotFound, c.name)
		}
		f := fields[j[0]]
		if f.Type.ID() != arrow.STRING && f.Type.ID() != arrow.LARGE_STRING {
			return nil, nil, fmt.Errorf("feed: %w: column %q of %s is %s, not a string or large_string: a tokenizer needs text (remove tokenizer from this column, or name a text column)",
				transport.ErrBadRequest, c.name, firstFile(ds), f.Type)
		}
		tok, sum, err := p.tokenizer(ctx, c.uri)
		if err != nil {
			return nil, nil, fmt.Errorf("feed: column %q: %w", c.name, err)
		}
		pre, suf := tok.Affixes()
		out = append(out, planTok{tokColumn: c, col: j[0], sum: sum, tok: tok, specials: len(pre) + len(suf)})
		fields[j[0]].Type = TokenType
	}
	md := ds.Schema.Metadata()
	return out, arrow.NewSchema(fields, &md), nil
}

// firstFile names ds's first file, for errors about its schema (every file
// has the same).
func firstFile(ds *loader.Dataset) string {
	if len(ds.Files) == 0 {
		return "the dataset"
	}
	return ds.Files[0].Object.URI
}

// tokenizerSums maps each tokenized column to its tokenizer's SHA-256 (nil
// when none).
func tokenizerSums(toks []planTok) map[string]string {
	if len(toks) == 0 {
		return nil
	}
	out := make(map[string]string, len(toks))
	for _, t := range toks {
		out[t.name] = t.sum
	}
	return out
}

// tokenizeRecord returns rec with each column of toks tokenized (schema
// out), allocated from mem, encoding on up to workers goroutines; it
// releases rec. A row that is not valid UTF-8 is an error naming the row
// through where(row).
func tokenizeRecord(rec arrow.RecordBatch, toks []planTok, out *arrow.Schema, workers int, mem memory.Allocator, where func(row int) string) (arrow.RecordBatch, error) {
	defer rec.Release()
	cols := append([]arrow.Array(nil), rec.Columns()...)
	var made []arrow.Array
	defer func() {
		for _, a := range made {
			a.Release()
		}
	}()
	for _, t := range toks {
		arr, err := TokenizeStrings(t.tok, rec.Column(t.col), t.addSpecial, workers, mem)
		if err != nil {
			var te *TextError
			if errors.As(err, &te) {
				return nil, fmt.Errorf("%s column %q byte %d: %w: the reference tokenizers library cannot take such text (a Python str cannot hold it): repair the file, or filter the row out", where(te.Row), t.name, te.Byte, tokenize.ErrInvalidUTF8)
			}
			return nil, fmt.Errorf("column %q: %w", t.name, err)
		}
		made = append(made, arr)
		cols[t.col] = arr
	}
	return array.NewRecordBatch(out, cols, rec.NumRows()), nil
}

// keptRowOf returns the physical row of its row group of row r of a record
// read by read for segment seg (a piece when piece) with the kept rows sel
// (nil: every row) taken.
func keptRowOf(sel *filter.Selection, seg batching.Segment, read loader.RowGroupRef, piece bool, r int) int64 {
	if sel != nil {
		k := int64(r)
		if piece {
			k += seg.Start
		}
		phys, _ := sel.Physical(k, k+1)
		return phys
	}
	return read.Start + int64(r)
}

// rowName names physical row row of the row group of ref in ds: "FILE row
// group G row R (row F of the file)".
func rowName(ds *loader.Dataset, ref loader.RowGroupRef, row int64) string {
	fileRow := row
	for _, m := range ds.Files[ref.File].RowGroups[:ref.Index] {
		fileRow += m.Rows
	}
	return fmt.Sprintf("%s row group %d row %d (row %d of the file)", ds.Files[ref.File].Object.URI, ref.Index, row, fileRow)
}

// prepareRead is the work a slice's reader does on each record it decodes
// when the plan has tokenized columns (loader.WithReaderTransform): take
// the rows filters keep, then tokenize. Read k is the plan's row group
// groups[k] (segs[k] when reading pieces) read by refs[k].
func prepareRead(ds *loader.Dataset, toks []planTok, out *arrow.Schema, sels func(g int) *filter.Selection,
	groups []int, segs []batching.Segment, refs []loader.RowGroupRef, workers int, mem memory.Allocator) loader.Transform {
	return func(k int, ref loader.RowGroupRef, rec arrow.RecordBatch) (arrow.RecordBatch, error) {
		piece := segs != nil
		seg := batching.Segment{}
		if piece {
			seg = segs[k]
		} else {
			seg.RowGroup = groups[k]
		}
		sel := sels(seg.RowGroup)
		rec, err := takeKept(rec, sel, seg, refs[k], piece, mem)
		if err != nil {
			return nil, fmt.Errorf("%s row group %d: %w", ds.Files[ref.File].Object.URI, ref.Index, err)
		}
		return tokenizeRecord(rec, toks, out, workers, mem, func(r int) string {
			return rowName(ds, ref, keptRowOf(sel, seg, refs[k], piece, r))
		})
	}
}

// The memory of tokenized columns (limits.go). A row's ids are bounded by
// its text: at most one id per byte of text plus the post-processor's
// specials. That is exact for byte-level BPE and for BPE with byte fallback
// (every id covers at least one byte), and WordPiece and Unigram give at
// most one id per character; a normalizer that lengthens text (NFKC of
// compatibility characters) can exceed it, so there it is an estimate. An
// id is 4 bytes and a row's offset 4 more.

// tokenRowBytes returns the bytes per row that records of a dataset whose
// decoded rows hold varRow bytes hold once toks are tokenized: the row,
// plus for each tokenized column the ids of up to varRow bytes of text and
// the specials, and an offset (the text is counted once more, as a bound
// on the column's own text). varRow is the footers' decoded bytes per row
// (loader.Dataset.ArrowRowBytes: the most of any row group, on average
// over its rows), so the bound holds for a row group's rows together, not
// for each row.
func tokenRowBytes(toks []planTok, varRow float64) float64 {
	out := varRow
	for _, t := range toks {
		out += 4 * (varRow + float64(t.specials) + 1)
	}
	return out
}

// tokensAhead returns the most bytes the ids of row groups in flight hold
// beside what the readers charge (their compressed plus decoded bytes, at
// most readAhead): 4 bytes per byte of decoded text, plus the specials and
// an offset per row, for as many rows as readAhead bytes can hold at ds's
// cheapest rows.
func tokensAhead(toks []planTok, ds *loader.Dataset, readAhead float64) float64 {
	if len(toks) == 0 {
		return 0
	}
	cheapest := 0.0
	for _, f := range ds.Files {
		for _, m := range f.RowGroups {
			if m.Rows > 0 {
				c := float64(m.Bytes+m.DecodedBytes) / float64(m.Rows)
				if cheapest == 0 || c < cheapest {
					cheapest = c
				}
			}
		}
	}
	rows := readAhead / max(cheapest, 1)
	var out float64
	for _, t := range toks {
		out += 4*readAhead + rows*4*(float64(t.specials)+1)
	}
	return out
}
