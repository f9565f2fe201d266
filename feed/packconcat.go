package feed

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/meshfeed/meshfeed/batching"
	"github.com/meshfeed/meshfeed/tokcount"
	"github.com/meshfeed/meshfeed/tokenize"
	"github.com/meshfeed/meshfeed/transport"
)

// Concatenated packing (a column's `pack: "concat"`; DESIGN.md,
// "Concatenated packing"): the column's documents, tokenized, each followed
// by the end-of-document token, are one token sequence per epoch, cut into
// rows of exactly length tokens (batching.ConcatPlan). Planning needs every
// document's token count: the token-count index (tokcount.go).

// PackConcat is the value of a column's pack that selects concatenated
// packing.
const PackConcat = "concat"

// eodCandidates are the end-of-document tokens looked for, in order, among a
// tokenizer's special tokens when the column names none.
var eodCandidates = []string{"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "[SEP]"}

// concatColumn is a column with pack "concat", as the request gives it.
type concatColumn struct {
	name       string
	tokenizer  string // URI of the tokenizer.json
	addSpecial bool
	length     int
	eod        string // the end-of-document token's content; "": look one up
	fill       int32  // the padding token
}

// concatPlan is what a concatenated stream needs beyond pipelinePlan.
type concatPlan struct {
	col  concatColumn
	plan *batching.ConcatPlan
	tok  *tokenize.Tokenizer
	eod  int32
	text int // index of the column in the decoded row groups
	// rem is the remainder of an elastic switch's epoch when the request
	// resumes in it with another num_slices; nil otherwise.
	rem *batching.Remainder
}

// concatProblems returns what a request with concatenated packing of col
// (columns[i]) cannot have: a tokenizer and a length are needed, the
// column is the only one, and neither pack_ratio nor filters go with it.
func concatProblems(req *transport.Request, i int) []string {
	col := req.Columns[i]
	var out []string
	bad := func(format string, args ...any) {
		out = append(out, fmt.Sprintf("columns[%d] %q: pack \"concat\" ", i, col.Name)+fmt.Sprintf(format, args...))
	}
	if col.Tokenizer == "" {
		bad("needs a tokenizer (the documents are tokenized on the server: Column(tokenizer=PATH_OR_URI))")
	}
	if col.Length <= 0 {
		bad("needs a length (the tokens of every packed row: Column(length=L))")
	}
	if col.PackRatio != 0 {
		bad("and pack_ratio %v are two packings: give one", col.PackRatio)
	}
	if col.DType != "" && col.DType != "int32" {
		bad("delivers int32 token ids, not dtype %q", col.DType)
	}
	if len(req.Columns) > 1 {
		bad("makes rows of tokens from several documents, so no other column can follow them: request this column alone")
	}
	if len(req.Filters) > 0 {
		bad("with filters is not supported yet: filter the dataset beforehand")
	}
	return out
}

// setConcat sets c.concat from the request's column with pack "concat"
// (none: nothing), which is then neither shaped nor filled by the loader,
// and returns problems with those of the request added.
func (c *streamConfig) setConcat(req *transport.Request, problems []string) []string {
	i := slices.IndexFunc(req.Columns, func(col transport.Column) bool { return col.Pack == PackConcat })
	if i < 0 {
		return problems
	}
	col := req.Columns[i]
	problems = append(problems, concatProblems(req, i)...)
	cc := &concatColumn{name: col.Name, tokenizer: col.Tokenizer, addSpecial: col.AddSpecial(), length: col.Length, eod: col.EODToken}
	if len(col.Fill) > 0 {
		f, err := transport.ParseFill(col.Fill)
		if err != nil || f.Kind != transport.FillInt || f.Int < math.MinInt32 || f.Int > math.MaxInt32 {
			problems = append(problems, fmt.Sprintf("columns[%d] %q: fill %s of pack \"concat\" is the padding token: want an int32", i, col.Name, col.Fill))
		}
		cc.fill = int32(f.Int)
	}
	c.concat, c.shaping, c.fills, c.tokens = cc, nil, map[string]float64{}, nil
	return problems
}

// eodToken returns the id of cc's end-of-document token in tok.
func eodToken(tok *tokenize.Tokenizer, cc concatColumn) (int32, error) {
	if cc.eod != "" {
		if id, ok := tok.TokenID(cc.eod); ok {
			return id, nil
		}
		return 0, fmt.Errorf("feed: %w: column %q: eod_token %q is not a token of tokenizer %s (neither an added token nor in its vocabulary): name one it has",
			transport.ErrBadRequest, cc.name, cc.eod, cc.tokenizer)
	}
	specials := tok.SpecialTokens()
	for _, c := range eodCandidates {
		if id, ok := specials[c]; ok {
			return id, nil
		}
	}
	return 0, fmt.Errorf("feed: %w: column %q: pack \"concat\" puts an end-of-document token after every document, and tokenizer %s has none of %s among its special tokens: name one with eod_token= (Column(eod_token=...))",
		transport.ErrBadRequest, cc.name, cc.tokenizer, strings.Join(eodCandidates, ", "))
}

// planConcat plans a request whose column is packed by concatenation: the
// dataset, its token counts (index, cache or counted) and the ConcatPlan,
// whose plan of the packed rows stands for the plan (its streams, steps and
// policy are the packed rows'), so that the step and memory checks and
// GetFlightInfo's answer work as for rows.
func (p *Pipeline) planConcat(ctx context.Context, cfg *streamConfig) (*pipelinePlan, error) {
	cc := *cfg.concat
	ds, err := p.dataset(ctx, cfg.datasets, cfg.columns, cfg.fills, cfg.manifest)
	if err != nil {
		return nil, err
	}
	text, err := textColumn(ds, cc.name)
	if err != nil {
		return nil, err
	}
	tok, hash, err := p.tokenizer(ctx, cc.tokenizer)
	if err != nil {
		return nil, fmt.Errorf("feed: column %q: %w", cc.name, err)
	}
	eod, err := eodToken(tok, cc)
	if err != nil {
		return nil, err
	}
	counts, err := p.tokenCounts(ctx, ds, tok, tokcount.Key{Tokenizer: hash, Column: cc.name, AddSpecial: cc.addSpecial})
	if err != nil {
		return nil, err
	}
	refs := ds.RowGroups()
	rgs := make([]batching.RowGroup, len(refs))
	perRG := make([][]int32, len(refs))
	for i, r := range refs {
		rgs[i] = batching.RowGroup{File: r.File, Index: r.Index, Rows: r.Rows, Bytes: r.Bytes}
		perRG[i] = counts[r.File].RowGroups[r.Index]
	}
	cp, err := batching.NewConcatPlan(rgs, perRG, cfg.plan, cc.length)
	if err != nil {
		return nil, fmt.Errorf("feed: plan %s, column %q packed by concatenation: %w", strings.Join(cfg.datasets, ", "), cc.name, err)
	}
	schema, err := concatSchema(cc, cfg)
	if err != nil {
		return nil, err
	}
	pl := &pipelinePlan{cfg: cfg, ds: ds, plan: cp.RowsPlan(), refs: refs, cutIn: ds.Schema, schema: schema,
		concat: &concatPlan{col: cc, plan: cp, tok: tok, eod: eod, text: text}}
	if e := cfg.elastic; e != nil && e.FromSlices != cfg.plan.D && cfg.start.Epoch == e.Epoch {
		// Packed rows are rows to the elastic contract: the remainder of
		// the plan of the packed rows, each range's tokens packed as planned.
		if pl.rem, err = cp.RowsPlan().Remainder(batching.Switch{FromD: e.FromSlices, Epoch: e.Epoch, Step: e.Step}); err != nil {
			return nil, fmt.Errorf("feed: elastic switch from num_slices %d at epoch %d step %d: %w", e.FromSlices, e.Epoch, e.Step, err)
		}
		pl.concat.rem = pl.rem
	}
	if err := p.checkStep(pl); err != nil {
		return nil, err
	}
	if err := p.checkMemory(pl); err != nil {
		return nil, err
	}
	return pl, nil
}

// concatSchema is the schema of a concatenated stream's slices: the tokens,
// segment ids and positions as fixed_size_list<int32>[L], and the mask
// under pad.
func concatSchema(cc concatColumn, cfg *streamConfig) (*arrow.Schema, error) {
	row := arrow.FixedSizeListOfNonNullable(int32(cc.length), arrow.PrimitiveTypes.Int32)
	fields := []arrow.Field{{Name: cc.name, Type: row}, {Name: cc.name + "_segment_ids", Type: row}, {Name: cc.name + "_positions", Type: row}}
	if cfg.plan.Policy == batching.Pad {
		for _, f := range fields {
			if f.Name == cfg.mask {
				return nil, fmt.Errorf("feed: %w: column %q is also the mask column's name: set mask_column to another name", transport.ErrBadRequest, cfg.mask)
			}
		}
		fields = append(fields, arrow.Field{Name: cfg.mask, Type: arrow.FixedWidthTypes.Boolean})
	}
	return arrow.NewSchema(fields, nil), nil
}
