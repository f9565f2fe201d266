package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/meshfeed/meshfeed/feed"
	"github.com/meshfeed/meshfeed/transport"
)

const planMixtureUsage = `usage: meshfeed plan --mixture SPEC.json --global-batch-size B --num-slices D
       [--last-batch drop|pad|raise] [--seed S] [--json]

Prints the plan of a weighted mixture of datasets from the footers alone: its steps
(the same on every process) and, per source, its rows, the rows the mixture delivers
from it and its weight (a source's rows are those its filters keep). SPEC.json is a ticket's "mixture" object (docs/PROTOCOL.md,
"Mixtures"), e.g.
  {"sources": [{"datasets": ["/data/web/*.parquet"], "weight": 0.7},
               {"datasets": ["/data/code/*.parquet"], "weight": 0.3,
                "rename": {"content": "text"}, "filters": [["lang", "==", "en"]]}],
   "stop": {"rule": "first_exhausted"}, "source_column": "source"}
`

// mixturePlanReport is what plan --mixture prints (as JSON with --json).
type mixturePlanReport struct {
	GlobalBatchSize int                   `json:"global_batch_size"`
	DataParallel    int                   `json:"data_parallel"`
	SliceRows       int                   `json:"slice_rows"`
	LastBatch       string                `json:"last_batch"`
	Stop            transport.MixtureStop `json:"stop"`
	Steps           int64                 `json:"steps"`
	DroppedRows     int64                 `json:"dropped_rows"`
	PaddedRows      int64                 `json:"padded_rows"`
	Columns         []string              `json:"columns"`
	Sources         []mixturePlanSource   `json:"sources"`
}

type mixturePlanSource struct {
	Datasets      []string `json:"datasets"`
	Weight        float64  `json:"weight"`
	Rows          int64    `json:"rows"`
	DeliveredRows int64    `json:"delivered_rows"`
	Seed          uint64   `json:"seed"`
}

// wantsMixturePlan reports whether plan's arguments name a mixture.
func wantsMixturePlan(args []string) bool {
	return slices.ContainsFunc(args, func(a string) bool {
		return a == "--mixture" || a == "-mixture" || strings.HasPrefix(a, "--mixture=") || strings.HasPrefix(a, "-mixture=")
	})
}

// runPlanMixture prints the plan of a mixture; see planMixtureUsage.
func runPlanMixture(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	fs.SetOutput(planStderr)
	spec := fs.String("mixture", "", "JSON file of the mixture (a ticket's mixture object; - for stdin)")
	B := fs.Int("global-batch-size", 0, "global batch size B (required)")
	D := fs.Int("num-slices", 1, "data-parallel degree D, a divisor of B")
	lb := fs.String("last-batch", "drop", "drop, pad or raise")
	seed := fs.Uint64("seed", 0, "the request's seed")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	fs.Usage = func() { fmt.Fprint(fs.Output(), planMixtureUsage, "\nflags:\n"); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return err
	}
	var raw []byte
	var err error
	if *spec == "-" {
		raw, err = io.ReadAll(os.Stdin)
	} else {
		raw, err = os.ReadFile(*spec)
	}
	if err != nil {
		return fmt.Errorf("--mixture: %w", err)
	}
	var m transport.Mixture
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return fmt.Errorf("--mixture %s: not a mixture object (docs/PROTOCOL.md, \"Mixtures\"): %w", *spec, err)
	}
	req := &transport.Request{Version: transport.Version, Mixture: &m, GlobalBatchSize: *B, NumSlices: *D,
		Slices: []int{0}, LastBatch: transport.LastBatch(*lb), Seed: *seed}
	if err := req.Validate(); err != nil {
		return err
	}
	p, err := feed.NewPipeline(ctx)
	if err != nil {
		return err
	}
	defer p.Close()
	info, err := p.Info(ctx, req)
	if err != nil {
		return err
	}
	if info.Mixture == nil {
		return errors.New("plan: the pipeline answered no mixture plan")
	}
	rep := mixturePlanReport{GlobalBatchSize: *B, DataParallel: *D, SliceRows: *B / *D, LastBatch: *lb, Stop: m.Stop,
		Steps: info.StepsPerEpoch, DroppedRows: info.DroppedRows, PaddedRows: info.PaddedRows}
	for _, f := range info.Schema.Fields() {
		rep.Columns = append(rep.Columns, f.Name)
	}
	for i, s := range info.Mixture.Sources {
		rep.Sources = append(rep.Sources, mixturePlanSource{Datasets: m.Sources[i].Datasets, Weight: s.Weight,
			Rows: s.Rows, DeliveredRows: s.DeliveredRows, Seed: s.Seed})
	}
	if *asJSON {
		enc := json.NewEncoder(planStdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	tw := tabwriter.NewWriter(planStdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "mixture of %d sources: B=%d D=%d b=%d last_batch=%s stop=%s\n", len(rep.Sources), *B, *D, rep.SliceRows, *lb, m.Stop.Rule)
	fmt.Fprintf(tw, "steps\t%d\t(every process)\n", rep.Steps)
	fmt.Fprintf(tw, "dropped rows\t%d\npadded rows\t%d\ncolumns\t%s\n\n", rep.DroppedRows, rep.PaddedRows, strings.Join(rep.Columns, ", "))
	fmt.Fprintf(tw, "source\tweight\trows\tdelivered\tdatasets\n")
	for i, s := range rep.Sources {
		fmt.Fprintf(tw, "%d\t%g\t%d\t%d\t%s\n", i, s.Weight, s.Rows, s.DeliveredRows, strings.Join(s.Datasets, ", "))
	}
	return tw.Flush()
}

// runPlanOrMixture is the plan command: runPlanMixture when the arguments
// name a mixture, runPlan otherwise.
func runPlanOrMixture(ctx context.Context, args []string) error {
	if wantsMixturePlan(args) {
		return runPlanMixture(ctx, args)
	}
	return runPlan(ctx, args)
}
