package feed

import (
	"fmt"
	"slices"
	"strings"

	"github.com/meshfeed/meshfeed/batching"
	"github.com/meshfeed/meshfeed/filter"
	"github.com/meshfeed/meshfeed/shape"
	"github.com/meshfeed/meshfeed/transport"
)

// streamConfig is a request in the vocabulary of the packages that serve it:
// the wire's Request (already validated by the transport) is mapped here,
// once, by configOf, and nothing downstream reads the Request again.
type streamConfig struct {
	datasets []string
	manifest string             // transport.Request.Manifest
	columns  []string           // projected columns in output order; empty: all
	shaping  []shape.Column     // the columns that are shaped
	fills    map[string]float64 // null replacements for the loader
	packed   bool               // a column is packed (slices have PackedRows rows)
	plan     batching.Config
	mask     string // mask column under Pad
	slices   []int  // this client's slices, ascending
	start    batching.Position
	epochs   int                // 0: unbounded
	elastic  *transport.Elastic // a switch of D inside an epoch (pipeline_elastic.go)
	filter   *filter.Predicate  // nil: every row (filter.go)
	concat   *concatColumn      // a column packed by concatenation (packconcat.go)
	tokens   []tokColumn        // columns with a tokenizer (tokenizer_plan.go)
}

// policyOf maps the wire's last_batch onto batching's policy.
func policyOf(lb transport.LastBatch) (batching.Policy, error) {
	switch lb {
	case transport.LastBatchDrop:
		return batching.Drop, nil
	case transport.LastBatchPad:
		return batching.Pad, nil
	case transport.LastBatchRaise:
		return batching.Raise, nil
	}
	return 0, fmt.Errorf("%w: last_batch %q is unknown: want \"drop\", \"pad\" or \"raise\"", transport.ErrBadRequest, lb)
}

// fillOf maps a ticket's fill onto shape's.
func fillOf(f transport.Fill) shape.Fill {
	switch f.Kind {
	case transport.FillInt:
		return shape.FillInt(f.Int)
	case transport.FillUint:
		return shape.FillUint(f.Uint)
	}
	return shape.FillFloat(f.Float)
}

// configOf maps req onto the packages' types, reporting every problem of the
// columns at once (InvalidArgument).
func configOf(req *transport.Request) (*streamConfig, error) {
	policy, err := policyOf(req.LastBatch)
	if err != nil {
		return nil, fmt.Errorf("feed: %w", err)
	}
	c := &streamConfig{
		datasets: req.Datasets,
		manifest: req.Manifest,
		fills:    map[string]float64{},
		plan: batching.Config{
			GlobalBatch:      req.GlobalBatchSize,
			D:                req.NumSlices,
			Seed:             req.Seed,
			ShuffleRowGroups: req.Shuffle.Enabled,
			Window:           int64(req.Shuffle.Window),
			Policy:           policy,
		},
		mask:    req.Mask(),
		slices:  req.Slices,
		start:   batching.Position{Epoch: req.Start.Epoch, Step: req.Start.Step},
		epochs:  req.Epochs,
		elastic: req.Elastic,
	}
	var problems []string
	packed := ""
	for i, col := range req.Columns {
		c.columns = append(c.columns, col.Name)
		sc := shape.Column{Name: col.Name, Length: col.Length, PackRatio: col.PackRatio}
		dt, err := shape.ParseDType(col.DType)
		if err != nil {
			problems = append(problems, fmt.Sprintf("columns[%d] %q: dtype %q is unknown: %v", i, col.Name, col.DType, err))
		}
		sc.DType = dt
		switch col.Overflow {
		case "", "reject":
			sc.Overflow = shape.Reject
		case "truncate":
			sc.Overflow = shape.Truncate
		default:
			problems = append(problems, fmt.Sprintf("columns[%d] %q: overflow %q is unknown (want \"reject\" or \"truncate\")", i, col.Name, col.Overflow))
		}
		if len(col.Fill) > 0 {
			f, err := transport.ParseFill(col.Fill)
			if err != nil {
				problems = append(problems, fmt.Sprintf("columns[%d] %q: %v", i, col.Name, err))
			}
			sc.Fill = fillOf(f)
			c.fills[col.Name] = f.Float
		}
		if col.Tokenizer != "" {
			c.tokens = append(c.tokens, tokColumn{name: col.Name, uri: col.Tokenizer, addSpecial: col.AddSpecial()})
		}
		if col.PackRatio > 0 && packed == "" {
			packed = col.Name
		}
		if sc.DType != shape.Keep || sc.Length != 0 || col.Overflow != "" || sc.Fill.IsSet() || sc.PackRatio != 0 {
			c.shaping = append(c.shaping, sc)
		}
	}
	c.packed, problems = packed != "", c.setConcat(req, problems) // packconcat.go
	if len(req.Filters) > 0 {
		pred, err := filter.Parse(req.Filters)
		if err != nil {
			problems = append(problems, err.Error())
		}
		c.filter = pred
	}
	if c.packed && policy == batching.Pad {
		ratio := req.Columns[slices.IndexFunc(req.Columns, func(c transport.Column) bool { return c.Name == packed })].PackRatio
		problems = append(problems, fmt.Sprintf("column %q has pack_ratio %v, which last_batch \"pad\" does not support (packing changes the row count, so no per-row mask can describe a packed slice): use \"drop\" or \"raise\"", packed, ratio))
	}
	switch len(problems) {
	case 0:
		return c, nil
	case 1:
		return nil, fmt.Errorf("feed: %w: %s", transport.ErrBadRequest, problems[0])
	default:
		return nil, fmt.Errorf("feed: %w: %d problems: %s", transport.ErrBadRequest, len(problems), strings.Join(problems, "; "))
	}
}
