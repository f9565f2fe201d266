package feed

import (
	"context"
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/meshfeed/meshfeed/batching"
	"github.com/meshfeed/meshfeed/filter"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/shape"
	"github.com/meshfeed/meshfeed/transport"
)

// pipelinePlan is a request planned on its dataset.
type pipelinePlan struct {
	cfg    *streamConfig
	ds     *loader.Dataset
	plan   *batching.Plan
	refs   []loader.RowGroupRef // the plan's row groups, same indices
	cutIn  *arrow.Schema        // schema of the decoded row groups
	shaper *shape.Shaper        // nil: no column is shaped
	schema *arrow.Schema        // schema of every slice sent
	rem    *batching.Remainder  // elastic resume: the remainder of the switch's epoch (pipeline_elastic.go)
	pieces piecePlan            // how each slice reads its row groups (budget.go)
	// sels are the rows filters keep of each of refs (nil: no filter, or
	// an entry nil: every row; filter.go).
	sels []*filter.Selection
	// concat is the plan of a column packed by concatenation (packconcat.go);
	// plan then stands for its packed rows.
	concat *concatPlan
	// toks are the tokenized columns (tokenizer_plan.go); cutIn is then
	// the schema of the records once tokenized.
	toks []planTok
}

// planFor maps the request (configOf), opens its dataset and plans it, from
// footers alone.
func (p *Pipeline) planFor(ctx context.Context, req *transport.Request) (*pipelinePlan, error) {
	cfg, err := configOf(req)
	if err != nil {
		return nil, err
	}
	if cfg.concat != nil {
		return p.planConcat(ctx, cfg)
	}
	ds, err := p.dataset(ctx, cfg.datasets, cfg.columns, cfg.fills, cfg.manifest)
	if err != nil {
		return nil, err
	}
	refs := ds.RowGroups()
	var sels []*filter.Selection
	if cfg.filter != nil {
		if refs, sels, err = p.selectRowGroupsKeeping(ctx, cfg.filter, ds); err != nil {
			return nil, err
		}
	}
	rgs := make([]batching.RowGroup, len(refs))
	for i, r := range refs {
		rgs[i] = batching.RowGroup{File: r.File, Index: r.Index, Rows: r.Rows, Bytes: r.Bytes}
		if sels != nil && sels[i] != nil {
			rgs[i].Rows = sels[i].Count()
		}
	}
	plan, err := batching.NewPlan(rgs, cfg.plan)
	if err != nil {
		return nil, fmt.Errorf("feed: plan %s: %w", strings.Join(cfg.datasets, ", "), err)
	}
	toks, cutIn, err := p.planTokenizers(ctx, cfg.tokens, ds)
	if err != nil {
		return nil, err
	}
	cutOut, err := batching.SliceSchema(cutIn, cfg.plan.Policy, cfg.mask)
	if err != nil {
		return nil, fmt.Errorf("feed: %w: the dataset already has a column %q, the mask column's name: set mask_column to another name or leave the column out of columns",
			transport.ErrBadRequest, cfg.mask)
	}
	pl := &pipelinePlan{cfg: cfg, ds: ds, plan: plan, refs: refs, cutIn: cutIn, schema: cutOut, sels: sels, toks: toks}
	if len(cfg.shaping) > 0 {
		sh, err := shape.NewShaper(cutOut, cfg.shaping)
		if err != nil {
			return nil, fmt.Errorf("feed: %w", err)
		}
		pl.shaper, pl.schema = sh, sh.Schema()
	}
	if err := pl.planElastic(); err != nil {
		return nil, err
	}
	if err := p.checkStep(pl); err != nil {
		return nil, err
	}
	if pl.pieces, err = p.planPieces(pl); err != nil {
		return nil, err
	}
	if err := p.checkMemory(pl); err != nil {
		return nil, err
	}
	return pl, nil
}
