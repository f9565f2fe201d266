package feed

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"google.golang.org/grpc/codes"

	"github.com/meshfeed/meshfeed/batching"
	"github.com/meshfeed/meshfeed/filter"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/shape"
	"github.com/meshfeed/meshfeed/transport"
)

// Mixtures (DESIGN.md, "Mixtures"): a request whose ticket carries a
// mixture reads each source as its own dataset (its files, columns, rename,
// shaping, shuffle and seed), plans each with batching.SourceConfig, and
// composes the steps with a batching.Mixture. Each slice of this client
// reads, per source, only that source's stream of that slice.

func init() {
	errorCodes = append(errorCodes,
		transport.ErrorCode{Target: batching.ErrInvalidWeights, Code: codes.InvalidArgument},
		transport.ErrorCode{Target: batching.ErrInvalidMixture, Code: codes.FailedPrecondition},
		transport.ErrorCode{Target: batching.ErrComposition, Code: codes.Internal},
	)
}

// mixSource is one planned source of a mixture.
type mixSource struct {
	idx      int
	name     string // for errors: "source 1 (gs://b/code/*.parquet)"
	ds       *loader.Dataset
	plan     *batching.Plan
	refs     []loader.RowGroupRef
	sels     []*filter.Selection // the kept rows of each of refs (nil: no filter; an entry nil: every row)
	cutIn    *arrow.Schema       // decoded schema, source names
	renamed  *arrow.Schema       // after the rename map
	shaper   *shape.Shaper       // nil: nothing shaped
	window   int64
	shaped   *arrow.Schema // after shaping
	seedUsed uint64
	toks     []planTok // tokenized columns (tokenizer_plan.go); cutIn is then tokenized
}

// mixturePlan is a request planned as a mixture.
type mixturePlan struct {
	req    *transport.Request
	srcs   []*mixSource
	mix    *batching.Mixture
	in     *arrow.Schema // the sources' common schema after shaping
	schema *arrow.Schema // every slice sent: in, the source column, the mask; packed: the packer's and the source per token
	slices []int
	packer *shape.Shaper // packs each slice's rows (mixture_pack.go); nil: no packing
	ratio  float64       // the packer's pack_ratio
	mask   string
	pad    bool
}

// sourceName names source i of m for errors.
func sourceName(i int, s transport.MixtureSource) string {
	return fmt.Sprintf("source %d (%s)", i, strings.Join(s.Datasets, ", "))
}

// planMixture opens and plans every source of req.Mixture, from footers
// alone, and checks that they agree.
//
// Length: per source, the steps of planFor (configOf, open, the source's
// filters, plan, shaping) with the mixture's renames and checks between
// them.
func (p *Pipeline) planMixture(ctx context.Context, req *transport.Request) (*mixturePlan, error) {
	m := req.Mixture
	policy, err := policyOf(req.LastBatch)
	if err != nil {
		return nil, fmt.Errorf("feed: %w", err)
	}
	mp := &mixturePlan{req: req, slices: req.Slices, mask: req.Mask(), pad: policy == batching.Pad}
	var packs [][]shape.Column
	for i, s := range m.Sources {
		name := sourceName(i, s)
		sub := &transport.Request{Version: req.Version, Datasets: s.Datasets, Columns: s.Columns, GlobalBatchSize: req.GlobalBatchSize,
			NumSlices: req.NumSlices, Slices: req.Slices, LastBatch: transport.LastBatchDrop, Filters: s.Filters}
		cfg, err := configOf(sub)
		if err != nil {
			return nil, fmt.Errorf("feed: mixture %s: %w", name, err)
		}
		if cfg.concat != nil {
			return nil, fmt.Errorf("feed: %w: mixture %s: %s", transport.ErrBadRequest, name, errMixtureConcat)
		}
		own, pk := splitPacking(cfg.shaping, s.Rename) // mixture_pack.go
		packs = append(packs, pk)
		ds, err := p.dataset(ctx, s.Datasets, cfg.columns, cfg.fills, cfg.manifest)
		if err != nil {
			return nil, fmt.Errorf("feed: mixture %s: %w", name, err)
		}
		seed := batching.SourceSeed(req.Seed, sourceKey(s))
		if s.Seed != nil {
			seed = *s.Seed
		}
		toks, cutIn, err := p.planTokenizers(ctx, cfg.tokens, ds)
		if err != nil {
			return nil, fmt.Errorf("feed: mixture %s: %w", name, err)
		}
		src := &mixSource{idx: i, name: name, ds: ds, refs: ds.RowGroups(), cutIn: cutIn, window: int64(s.Shuffle.Window), seedUsed: seed, toks: toks}
		if cfg.filter != nil {
			if src.refs, src.sels, err = p.selectRowGroups(ctx, cfg.filter, ds); err != nil {
				return nil, fmt.Errorf("feed: mixture %s: %w", name, err)
			}
		}
		rgs := make([]batching.RowGroup, len(src.refs))
		for j, r := range src.refs {
			rgs[j] = batching.RowGroup{File: r.File, Index: r.Index, Rows: r.Rows, Bytes: r.Bytes}
			if src.sels != nil && src.sels[j] != nil {
				rgs[j].Rows = src.sels[j].Count() // the plan numbers the kept rows (filter.go)
			}
		}
		if src.plan, err = batching.NewPlan(rgs, batching.SourceConfig(req.NumSlices, seed, s.Shuffle.Enabled, src.window)); err != nil {
			return nil, fmt.Errorf("feed: mixture %s: %w", name, err)
		}
		if src.renamed, err = renameSchema(cutIn, s.Rename); err != nil {
			return nil, fmt.Errorf("feed: %w: mixture %s: %v", transport.ErrBadRequest, name, err)
		}
		src.shaped = src.renamed
		if len(own) > 0 {
			cols := slices.Clone(own)
			for j := range cols {
				if to, ok := s.Rename[cols[j].Name]; ok {
					cols[j].Name = to
				}
			}
			if src.shaper, err = shape.NewShaper(src.renamed, cols); err != nil {
				return nil, fmt.Errorf("feed: mixture %s: %w", name, err)
			}
			src.shaped = src.shaper.Schema()
		}
		mp.srcs = append(mp.srcs, src)
	}
	pack, err := samePacking(mp.srcs, packs) // mixture_pack.go
	if err != nil {
		return nil, err
	}
	if mp.in, err = commonSchema(mp.srcs); err != nil {
		return nil, err
	}
	if mp.schema, err = batching.MixtureSliceSchema(mp.in, policy, m.SourceColumn, mp.mask); err != nil {
		return nil, fmt.Errorf("feed: %w: %v: choose another source_column or mask_column", transport.ErrBadRequest, err)
	}
	if err := mp.planPacking(pack, policy); err != nil {
		return nil, err
	}
	if mp.mix, err = p.newMixture(mp, policy); err != nil {
		return nil, err
	}
	if err := p.checkMixtureStep(mp); err != nil {
		return nil, err
	}
	return mp, nil
}

// newMixture plans the composition and the stop of mp.
func (p *Pipeline) newMixture(mp *mixturePlan, policy batching.Policy) (*batching.Mixture, error) {
	m := mp.req.Mixture
	stop, err := batching.ParseStopRule(m.Stop.Rule)
	if err != nil {
		return nil, fmt.Errorf("feed: %w", err)
	}
	cfg := batching.MixtureConfig{GlobalBatch: mp.req.GlobalBatchSize, D: mp.req.NumSlices, Seed: mp.req.Seed,
		Policy: policy, Stop: stop, NumSteps: m.Stop.NumSteps}
	if e := mp.req.Elastic; e != nil && e.FromSlices != mp.req.NumSlices {
		if mp.packer != nil {
			if err := checkPackedSwitch(mp.req.GlobalBatchSize, e.FromSlices, mp.req.NumSlices, mp.ratio); err != nil {
				return nil, err
			}
		}
		cfg.Elastic = &batching.Switch{FromD: e.FromSlices, Epoch: e.Epoch, Step: e.Step}
	}
	for _, h := range m.History {
		cfg.Spans = append(cfg.Spans, batching.WeightSpan{FromStep: h.FromStep, Weights: h.Weights, Start: h.Positions})
	}
	cur := batching.WeightSpan{FromStep: m.WeightsFrom, Start: m.WeightsFromPositions}
	for _, s := range m.Sources {
		cur.Weights = append(cur.Weights, s.Weight)
	}
	cfg.Spans = append(cfg.Spans, cur)
	plans := make([]*batching.Plan, len(mp.srcs))
	for i, s := range mp.srcs {
		plans[i] = s.plan
	}
	mix, err := batching.NewMixture(plans, cfg)
	if err != nil {
		return nil, fmt.Errorf("feed: mixture: %w%s", err, namesIn(err, mp))
	}
	return mix, nil
}

// namesIn adds the datasets of the sources a batching error names by
// index ("source 2"), so that the error names them the way the user does.
func namesIn(err error, mp *mixturePlan) string {
	var out []string
	msg := err.Error()
	for i, s := range mp.srcs {
		if strings.Contains(msg, fmt.Sprintf("source %d ", i)) || strings.Contains(msg, fmt.Sprintf("source %d:", i)) {
			out = append(out, s.name)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return " [" + strings.Join(out, "; ") + "]"
}

// sourceKey names a source for its derived seed: its datasets, sorted.
func sourceKey(s transport.MixtureSource) string {
	ds := slices.Clone(s.Datasets)
	slices.Sort(ds)
	return strings.Join(ds, "\n")
}

// renameSchema returns sch with the columns of rename renamed. A name of
// rename that is not a column, or a rename onto another column's name, is
// an error.
func renameSchema(sch *arrow.Schema, rename map[string]string) (*arrow.Schema, error) {
	if len(rename) == 0 {
		return sch, nil
	}
	fields := sch.Fields()
	keys := make([]string, 0, len(rename))
	for k := range rename {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, from := range keys {
		j := sch.FieldIndices(from)
		if len(j) == 0 {
			return nil, fmt.Errorf("rename %q -> %q: the source has no column %q (its columns: %s)", from, rename[from], from, fieldNames(sch))
		}
		fields[j[0]].Name = rename[from]
	}
	seen := map[string]bool{}
	for _, f := range fields {
		if seen[f.Name] {
			return nil, fmt.Errorf("after rename, two columns are named %q", f.Name)
		}
		seen[f.Name] = true
	}
	md := sch.Metadata()
	return arrow.NewSchema(fields, &md), nil
}

func fieldNames(sch *arrow.Schema) string {
	var out []string
	for _, f := range sch.Fields() {
		out = append(out, fmt.Sprintf("%q", f.Name))
	}
	return strings.Join(out, ", ")
}

// commonSchema checks that every source delivers the same columns, in the
// same order, of the same types after shaping, and returns that schema (a
// column nullable where any source's is). A difference names both sources
// and the column.
func commonSchema(srcs []*mixSource) (*arrow.Schema, error) {
	first := srcs[0]
	fields := first.shaped.Fields()
	for _, s := range srcs[1:] {
		got := s.shaped.Fields()
		for j := 0; j < max(len(fields), len(got)); j++ {
			switch {
			case j >= len(got):
				return nil, fmt.Errorf("feed: %w: mixture %s has no column %q, which %s delivers (after rename and shaping; its columns: %s)",
					transport.ErrBadRequest, s.name, fields[j].Name, first.name, fieldNames(s.shaped))
			case j >= len(fields):
				return nil, fmt.Errorf("feed: %w: mixture %s delivers a column %q that %s does not (after rename and shaping; its columns: %s)",
					transport.ErrBadRequest, s.name, got[j].Name, first.name, fieldNames(first.shaped))
			case got[j].Name != fields[j].Name:
				return nil, fmt.Errorf("feed: %w: mixture %s delivers column %d as %q, %s as %q: every source must deliver the same columns in the same order (select them with columns, name them with rename)",
					transport.ErrBadRequest, s.name, j, got[j].Name, first.name, fields[j].Name)
			case !arrow.TypeEqual(got[j].Type, fields[j].Type):
				return nil, fmt.Errorf("feed: %w: mixture column %q is %s in %s but %s in %s: give the column a dtype (and length) so that every source delivers the same",
					transport.ErrBadRequest, fields[j].Name, got[j].Type, s.name, fields[j].Type, first.name)
			}
			fields[j].Nullable = fields[j].Nullable || got[j].Nullable
		}
	}
	md := first.shaped.Metadata()
	return arrow.NewSchema(fields, &md), nil
}

// checkMixtureStep refuses a mixture whose step cannot fit the server's max
// message size.
func (p *Pipeline) checkMixtureStep(mp *mixturePlan) error {
	l := p.serverLimits()
	if l.MaxMessageSize <= 0 {
		return nil
	}
	step := mp.stepBytes()
	if step > float64(l.MaxMessageSize) {
		return fmt.Errorf("feed: %w: a step of this mixture holds about %.0f bytes (%d slices of %d rows), over the server's max message size of %d bytes (--max-message-size): lower global_batch_size or the slices per request",
			transport.ErrTooLarge, step, len(mp.slices), mp.packedRows(), l.MaxMessageSize)
	}
	return nil
}

// stepBytes estimates the bytes of one step of this client.
func (mp *mixturePlan) stepBytes() float64 {
	var varRow float64
	for _, s := range mp.srcs {
		varRow = max(varRow, tokenRowBytes(s.toks, s.ds.ArrowRowBytes()))
	}
	return float64(len(mp.slices)) * float64(mp.packedRows()) * schemaRowBytes(mp.schema, varRow)
}

// mixtureInfo is Info for a mixture.
func (p *Pipeline) mixtureInfo(ctx context.Context, req *transport.Request) (*transport.PlanInfo, error) {
	mp, err := p.planMixture(ctx, req)
	if err != nil {
		return nil, err
	}
	info := &transport.PlanInfo{Schema: mp.schema, StepsPerEpoch: int64(mp.mix.Steps()),
		DroppedRows: mp.mix.DroppedRows(), PaddedRows: mp.mix.PaddedRows(), Mixture: &transport.MixtureInfo{}}
	for i, s := range mp.srcs {
		info.NumRows += s.plan.N()
		info.Mixture.Sources = append(info.Mixture.Sources, transport.MixtureSourceInfo{
			Rows: s.plan.N(), DeliveredRows: mp.mix.SourceRows(i), Weight: req.Mixture.Sources[i].Weight, Seed: s.seedUsed,
			Tokenizers: tokenizerSums(s.toks)})
	}
	return info, nil
}
