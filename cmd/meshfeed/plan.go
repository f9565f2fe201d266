package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/meshfeed/meshfeed/batching"
	"github.com/meshfeed/meshfeed/feed"
	"github.com/meshfeed/meshfeed/filter"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/shard"
)

// planStdout is where plan prints its report (a variable for tests).
var planStdout io.Writer = os.Stdout

// planStderr receives flag errors and usage (a variable for tests).
var planStderr io.Writer = os.Stderr

// planArgs is the parsed and validated command line of plan.
type planArgs struct {
	asJSON      bool
	data        []string
	columns     []string
	globalBatch int
	mesh        shard.Mesh
	batchAxes   []string
	topology    string // "" unless --topology was given
	cfg         batching.Config
	epoch       int
	manifest    string            // --manifest: "auto", "off" or a URI
	filters     string            // --filters: the ticket's JSON form; "" keeps every row
	tokenizers  map[string]string // --tokenizer COLUMN=URI
}

// planProcess is one process of the report.
type planProcess struct {
	Process int   `json:"process"`
	Devices []int `json:"devices"`
	// Slices are the batch slices (= streams) the process's devices hold.
	Slices []int `json:"slices"`
	// StepsPerEpoch is the same for every process (DESIGN.md invariant 1).
	StepsPerEpoch int `json:"steps_per_epoch"`
	// StreamRows is the rows of the process's streams in one epoch.
	StreamRows int64 `json:"stream_rows"`
	// RowGroups is the number of distinct row groups the process reads in the
	// epoch; Bytes their projected compressed bytes.
	RowGroups int   `json:"row_groups"`
	Bytes     int64 `json:"bytes"`
}

// planReport is what plan prints (as JSON with --json).
type planReport struct {
	Data             []string      `json:"data"`
	Columns          []string      `json:"columns"`
	Files            int           `json:"files"`
	TotalRowGroups   int           `json:"total_row_groups"`
	TotalBytes       int64         `json:"total_bytes"`
	NumRows          int64         `json:"num_rows"`
	Mesh             string        `json:"mesh"`
	Topology         string        `json:"topology,omitempty"`
	BatchAxes        []string      `json:"batch_axes"`
	Devices          int           `json:"devices"`
	GlobalBatchSize  int           `json:"global_batch_size"` // B
	DataParallel     int           `json:"data_parallel"`     // D
	SliceRows        int           `json:"slice_rows"`        // b = B/D
	LastBatch        string        `json:"last_batch"`
	Seed             uint64        `json:"seed"`
	ShuffleRowGroups bool          `json:"shuffle_row_groups"`
	ShuffleWindow    int64         `json:"shuffle_window"`
	Epoch            int           `json:"epoch"`
	StepsPerEpoch    int           `json:"steps_per_epoch"`
	DroppedRows      int64         `json:"dropped_rows"`
	PaddedRows       int64         `json:"padded_rows"`
	Processes        []planProcess `json:"processes"`
	// Manifest is the manifest planning used ("" when it read the
	// footers), ManifestReason why none served, PlanRequests the store
	// requests planning made.
	Manifest       string `json:"manifest"`
	ManifestReason string `json:"manifest_reason,omitempty"`
	PlanRequests   int64  `json:"plan_requests"`
	// Filters are the --filters given (NumRows counts the rows they keep),
	// FilterRowGroups how the row groups were decided.
	Filters json.RawMessage `json:"filters,omitempty"`
	// Tokenizers maps each --tokenizer column to its tokenizer.json's
	// SHA-256, as GetFlightInfo reports it.
	Tokenizers      map[string]string  `json:"tokenizers,omitempty"`
	FilterRowGroups *feed.FilterCounts `json:"filter_row_groups,omitempty"`
}

const planUsage = `usage: meshfeed plan --data URI --global-batch-size B --mesh data=4,model=2 --batch-axes data
       [--processes P | --topology 4x4 --chips-per-host 4] [--last-batch drop|pad|raise]
       [--seed S [--shuffle-window W]] [--columns a,b] [--epoch E] [--filters JSON] [--tokenizer COLUMN=URI] [--json]

Prints the epoch plan of a dataset for a JAX mesh from the footers alone (no data
page is read): rows, steps per epoch, dropped or padded rows, B, D and b = B/D, and
for every process the batch slices (streams) it serves, the row groups it reads and
their bytes in epoch E. Every process has the same number of steps per epoch.

JSON keys: num_rows, steps_per_epoch, dropped_rows, padded_rows, global_batch_size (B),
data_parallel (D), slice_rows (b), processes[{process, devices, slices,
steps_per_epoch, stream_rows, row_groups, bytes}], ...
`

// parsePlanArgs parses and validates plan's flags, reporting every bad value
// at once, each naming its flag and the valid form. Usage and flag package
// errors go to w.
func parsePlanArgs(args []string, w io.Writer) (planArgs, error) {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	fs.SetOutput(w)
	var a planArgs
	data, cols, axes := stringList{}, stringList{}, stringList{}
	fs.BoolVar(&a.asJSON, "json", false, "print JSON instead of a table")
	fs.StringVar(&a.manifest, "manifest", loader.ManifestAuto, `dataset manifest: "auto" (the dataset directory's _meshfeed_manifest.parquet when present), "off" (read every footer) or its URI`)
	fs.Var(&data, "data", "dataset: files, directories or globs, local, gs:// or s3://, or https:// URLs of files; repeatable or comma-separated (required)")
	fs.Var(&cols, "columns", "comma-separated columns to project (default: all); bytes count only these")
	planNumFlag(fs, "global-batch-size", "global batch size B, rows per step over all devices; > 0 and a multiple of D (required)",
		"a positive integer B, a multiple of D", &a.globalBatch)
	meshSpec := fs.String("mesh", "", "mesh axes and sizes in mesh order, major to minor, as name=size pairs, e.g. data=4,model=2 (required)")
	fs.Var(&axes, "batch-axes", `comma-separated mesh axes the batch dimension is split over, in PartitionSpec order, e.g. data or data,fsdp; "" means replicated (D=1) (required)`)
	procs := 1
	planNumFlag(fs, "processes", "number of processes P (default 1); devices 0..N-1 are laid row-major over the mesh and process p owns the contiguous block of N/P devices [p*N/P, (p+1)*N/P); must divide N",
		"a positive integer dividing the mesh's devices", &procs)
	topo := fs.String("topology", "", "chip grid such as 4x4 or 2x2x4 (with --chips-per-host): devices and processes come from it, --mesh gives the shape; excludes --processes")
	chipsPerHost := 0
	planNumFlag(fs, "chips-per-host", "devices per process (host) of --topology; > 0 and dividing the number of chips",
		"a positive integer dividing the topology's chips", &chipsPerHost)
	lastBatch := fs.String("last-batch", "drop", "final-batch policy: drop (floor(N/B) steps), pad (ceil(N/B) steps, masked padding) or raise (error unless B divides N)")
	var seed uint64
	planNumFlag(fs, "seed", "shuffle seed S; giving --seed turns on row-group shuffling (a permutation per epoch); without it the dataset order is kept",
		"an unsigned 64-bit integer", &seed)
	var window int64
	planNumFlag(fs, "shuffle-window", "shuffle window W in rows (default 0): W > 0 also permutes the rows within each W-row window of every stream (needs --seed); 0 keeps stream order",
		"a row count >= 0", &window)
	planNumFlag(fs, "epoch", "epoch E whose read sets and bytes are reported (default 0)", "an epoch number >= 0", &a.epoch)
	fs.StringVar(&a.filters, "filters", "", `keep only the rows a filter matches, as pyarrow.parquet's filters in JSON, e.g. '[["score", ">=", 0.5], ["lang", "in", ["en", "de"]]]' (docs/PROTOCOL.md, "Filters"); row groups the footers' statistics rule out are not read, the filter columns of the others are`)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), planUsage, "\nflags:\n")
		fs.PrintDefaults()
	}
	fs.Func("tokenizer", "COLUMN=URI: the column is tokenized with the tokenizer.json at URI (local, gs://, s3://, az://, https://); the plan checks the column is text and reports the file's SHA-256; repeatable", tokenizerFlag(&a.tokenizers))
	if err := fs.Parse(args); err != nil {
		return a, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if fs.NArg() > 0 {
		bad("unexpected argument %q: give datasets with --data URI", fs.Arg(0))
	}
	a.data, a.columns = data, cols
	if len(a.data) == 0 {
		bad("--data is required: files, directories or globs, local, gs://bucket/prefix or s3://bucket/prefix, or https:// URLs of files")
	}
	if !set["global-batch-size"] {
		bad("--global-batch-size is required: the global batch size B, a positive multiple of D")
	} else if a.globalBatch <= 0 {
		bad("--global-batch-size %d: want a positive integer, a multiple of D", a.globalBatch)
	}
	policy, err := batching.ParsePolicy(*lastBatch)
	if err != nil {
		bad("--last-batch: %w", err)
	}
	if a.epoch < 0 {
		bad("--epoch %d: want an epoch >= 0", a.epoch)
	}
	checkPlanFilters(a.filters, bad)
	if window < 0 || window > math.MaxInt32 {
		bad("--shuffle-window %d: want 0 (no row shuffle) or a window of 1..%d rows", window, math.MaxInt32)
	} else if window > 0 && !set["seed"] {
		bad("--shuffle-window %d needs --seed S: the window permutations are drawn from the seed", window)
	}
	a.cfg = batching.Config{
		GlobalBatch:      a.globalBatch,
		Seed:             seed,
		ShuffleRowGroups: set["seed"],
		Window:           window,
		Policy:           policy,
	}

	// The mesh: shape from --mesh, devices and processes from --processes or
	// --topology.
	a.resolveMesh(set, meshFlags{spec: *meshSpec, topo: *topo, procs: procs, chipsPerHost: chipsPerHost}, axes, bad)
	return a, errors.Join(errs...)
}

// meshFlags are the plan command's mesh flags as given.
type meshFlags struct {
	spec, topo          string // --mesh, --topology
	procs, chipsPerHost int    // --processes, --chips-per-host
}

// resolveMesh sets a.mesh, a.batchAxes and a.topology from the mesh flags
// (set names those given), reporting each problem through bad.
func (a *planArgs) resolveMesh(set map[string]bool, mf meshFlags, axes []string, bad func(string, ...any)) {
	var meshOK bool
	if !set["mesh"] {
		bad("--mesh is required: name=size pairs in mesh order, e.g. data=4,model=2")
	} else if axisNames, shape, err := parsePlanMesh(mf.spec); err != nil {
		bad("%w", err)
	} else {
		a.mesh.Axes, a.mesh.Shape = axisNames, shape
		meshOK = true
	}
	if !set["batch-axes"] {
		bad(`--batch-axes is required: comma-separated mesh axes the batch is split over, e.g. data, or "" for replicated`)
	}
	a.batchAxes = axes
	if set["topology"] {
		if set["processes"] {
			bad("--processes and --topology exclude each other: with --topology the processes come from --chips-per-host")
		}
		if !set["chips-per-host"] {
			bad("--topology %q needs --chips-per-host N, the devices per host", mf.topo)
		}
	} else if set["chips-per-host"] {
		bad("--chips-per-host needs --topology, e.g. --topology 4x4 --chips-per-host 4")
	}
	if set["topology"] && set["chips-per-host"] {
		t, err := shard.ParseTopology(mf.topo, mf.chipsPerHost)
		if err != nil {
			bad("--topology %q --chips-per-host %d: %w (want a grid like 4x4 or 2x2x4 and a positive chips-per-host dividing its chips)", mf.topo, mf.chipsPerHost, err)
		} else if meshOK {
			m, err := t.MakeMesh(a.mesh.Shape, a.mesh.Axes)
			if err != nil {
				bad("--mesh %q does not fit --topology %q: %w", mf.spec, mf.topo, err)
			} else {
				a.mesh = m
				a.topology = t.String()
			}
		}
	} else if meshOK && !set["topology"] {
		n := 1
		for _, s := range a.mesh.Shape {
			n *= s // parsePlanMesh bounds the product by shard.MaxDevices
		}
		if mf.procs < 1 || mf.procs > n || n%mf.procs != 0 {
			bad("--processes %d: want a positive divisor of the mesh's %d devices", mf.procs, n)
		} else {
			per := n / mf.procs
			a.mesh.Devices = make([]int, n)
			a.mesh.Process = make([]int, n)
			for i := range n {
				a.mesh.Devices[i] = i
				a.mesh.Process[i] = i / per
			}
		}
	}
}

// planNumFlag defines an integer flag whose parse error says what is wanted.
func planNumFlag[T int | int64 | uint64](fs *flag.FlagSet, name, usage, want string, dst *T) {
	fs.Func(name, usage, func(s string) error {
		var v T
		var err error
		switch p := any(&v).(type) {
		case *int:
			*p, err = strconv.Atoi(s)
		case *int64:
			*p, err = strconv.ParseInt(s, 10, 64)
		case *uint64:
			*p, err = strconv.ParseUint(s, 10, 64)
		}
		if err != nil {
			return fmt.Errorf("want %s", want)
		}
		*dst = v
		return nil
	})
}

// parsePlanMesh parses --mesh: comma-separated name=size pairs, e.g.
// "data=4,model=2", into axis names and sizes.
func parsePlanMesh(spec string) ([]string, []int, error) {
	want := func(why string) error {
		return fmt.Errorf("--mesh %q: %s; want name=size pairs in mesh order, e.g. data=4,model=2", spec, why)
	}
	if strings.TrimSpace(spec) == "" {
		return nil, nil, want("no axes")
	}
	var names []string
	var shape []int
	seen := map[string]bool{}
	devices := 1
	for _, part := range strings.Split(spec, ",") {
		name, size, ok := strings.Cut(strings.TrimSpace(part), "=")
		name, size = strings.TrimSpace(name), strings.TrimSpace(size)
		if !ok {
			return nil, nil, want(fmt.Sprintf("%q has no =size", part))
		}
		if name == "" {
			return nil, nil, want(fmt.Sprintf("%q has no axis name", part))
		}
		if seen[name] {
			return nil, nil, want(fmt.Sprintf("axis %q listed twice", name))
		}
		seen[name] = true
		n, err := strconv.Atoi(size)
		if err != nil || n < 1 {
			return nil, nil, want(fmt.Sprintf("size %q of axis %q is not a positive integer", size, name))
		}
		if n > shard.MaxDevices || devices > shard.MaxDevices/n {
			return nil, nil, want(fmt.Sprintf("more than %d devices", shard.MaxDevices))
		}
		devices *= n
		names = append(names, name)
		shape = append(shape, n)
	}
	return names, shape, nil
}

// checkPlanFilters reports through bad a --filters that does not parse.
func checkPlanFilters(filters string, bad func(string, ...any)) {
	if filters == "" {
		return
	}
	if _, err := filter.Parse([]byte(filters)); err != nil {
		bad("--filters: %w", err)
	}
}

// openPlanDataset opens a's dataset, projected to a's columns, and returns
// the row groups the plan numbers: every row group, or with --filters the
// ones they keep (Rows their kept rows) and how they were decided.
func openPlanDataset(ctx context.Context, store objstore.Store, a planArgs) (*loader.Dataset, []loader.RowGroupRef, *feed.FilterCounts, error) {
	ds, err := loader.Open(ctx, store, a.data, loader.WithColumns(a.columns...), manifestOption(a.manifest))
	if err != nil {
		return nil, nil, nil, err
	}
	if a.filters == "" {
		return ds, ds.RowGroups(), nil, nil
	}
	refs, counts, err := feed.FilterRowGroups(ctx, ds, []byte(a.filters))
	if err != nil {
		return nil, nil, nil, err
	}
	return ds, refs, &counts, nil
}

// planLayout is the mesh layout of a's --mesh and --batch-axes, checked
// against --global-batch-size; it sets a.cfg.D.
func planLayout(a *planArgs) (*shard.Layout, error) {
	layout, err := shard.NewLayout(a.mesh, a.batchAxes)
	if err != nil {
		if errors.Is(err, shard.ErrUnknownAxis) || errors.Is(err, shard.ErrDuplicateAxis) {
			return nil, fmt.Errorf("--batch-axes %q: %w; want distinct axes of --mesh %s, comma-separated", strings.Join(a.batchAxes, ","), err, a.mesh)
		}
		return nil, fmt.Errorf("--mesh: %w", err)
	}
	if _, err := layout.SliceRows(a.globalBatch); err != nil {
		return nil, fmt.Errorf("--global-batch-size %d: %w", a.globalBatch, err)
	}
	a.cfg.D = layout.D()
	return layout, nil
}

// runPlan prints the epoch plan of a dataset for a mesh; see planUsage.
func runPlan(ctx context.Context, args []string) error {
	a, err := parsePlanArgs(args, planStderr)
	if err != nil {
		return err
	}
	layout, err := planLayout(&a)
	if err != nil {
		return err
	}

	store, err := objstore.NewStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	ds, refs, counts, err := openPlanDataset(ctx, store, a)
	if err != nil {
		return err
	}
	rgs, total := planRowGroups(refs)
	// Errors of NewPlan (raise with a remainder, drop with N < B, ...) already
	// name N, B and the remainder; they are returned as they are.
	plan, err := batching.NewPlan(rgs, a.cfg)
	if err != nil {
		return err
	}

	pi := ds.PlanInfo()
	rep := planReport{
		Data:             a.data,
		Columns:          a.columns,
		Filters:          json.RawMessage(a.filters),
		FilterRowGroups:  counts,
		Files:            len(ds.Files),
		TotalRowGroups:   len(refs),
		TotalBytes:       total,
		NumRows:          plan.N(),
		Mesh:             a.mesh.String(),
		Topology:         a.topology,
		BatchAxes:        layout.BatchAxes(),
		Devices:          len(a.mesh.Devices),
		GlobalBatchSize:  a.globalBatch,
		DataParallel:     layout.D(),
		SliceRows:        plan.SliceRows(),
		LastBatch:        a.cfg.Policy.String(),
		Seed:             a.cfg.Seed,
		ShuffleRowGroups: a.cfg.ShuffleRowGroups,
		ShuffleWindow:    a.cfg.Window,
		Epoch:            a.epoch,
		StepsPerEpoch:    plan.StepsPerEpoch(),
		DroppedRows:      plan.DroppedRows(),
		PaddedRows:       plan.PaddedRows(),
	}
	rep.Manifest, rep.ManifestReason, rep.PlanRequests = pi.Manifest, pi.Reason, pi.Requests
	if rep.Tokenizers, err = planTokenizerSums(ctx, store, ds, a.tokenizers); err != nil {
		return err
	}
	if len(rep.Columns) == 0 {
		rep.Columns = []string{}
		for _, f := range ds.Schema.Fields() {
			rep.Columns = append(rep.Columns, f.Name)
		}
	}
	if rep.BatchAxes == nil {
		rep.BatchAxes = []string{}
	}
	if rep.Processes, err = planProcesses(a, layout, plan); err != nil {
		return err
	}

	if a.asJSON {
		enc := json.NewEncoder(planStdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return printPlanTable(planStdout, rep)
}

// tokenizerFlag parses a --tokenizer COLUMN=URI into m.
func tokenizerFlag(m *map[string]string) func(string) error {
	return func(v string) error {
		col, uri, ok := strings.Cut(v, "=")
		if !ok || col == "" || uri == "" {
			return fmt.Errorf("want COLUMN=URI, got %q", v)
		}
		if *m == nil {
			*m = map[string]string{}
		}
		(*m)[col] = uri
		return nil
	}
}

// planTokenizerSums reads each column's tokenizer (checking the column is
// text) and returns their SHA-256s, as GetFlightInfo reports them.
func planTokenizerSums(ctx context.Context, store objstore.Store, ds *loader.Dataset, toks map[string]string) (map[string]string, error) {
	if len(toks) == 0 {
		return nil, nil
	}
	cache := feed.NewTokenizerCache(len(toks))
	out := map[string]string{}
	for col, uri := range toks {
		if _, err := feed.TextColumn(ds, col); err != nil {
			return nil, err
		}
		_, sum, err := cache.Get(ctx, store, uri)
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", col, err)
		}
		out[col] = sum
	}
	return out, nil
}

// planRowGroups returns the plan's view of the dataset's row groups and
// their total bytes.
func planRowGroups(refs []loader.RowGroupRef) ([]batching.RowGroup, int64) {
	rgs := make([]batching.RowGroup, len(refs))
	var total int64
	for i, r := range refs {
		rgs[i] = batching.RowGroup{File: r.File, Index: r.Index, Rows: r.Rows, Bytes: r.Bytes}
		total += r.Bytes
	}
	return rgs, total
}

// planProcesses reports, for each process of the layout, its devices and
// slices and what it reads in epoch a.epoch.
func planProcesses(a planArgs, layout *shard.Layout, plan *batching.Plan) ([]planProcess, error) {
	var out []planProcess
	devices := map[int][]int{}
	for i, d := range a.mesh.Devices {
		p := a.mesh.Process[i]
		devices[p] = append(devices[p], d)
	}
	for _, p := range layout.Processes() {
		slices, err := layout.ProcessSlices(p)
		if err != nil {
			return nil, err
		}
		pp := planProcess{
			Process:       p,
			Devices:       devices[p],
			Slices:        slices,
			StepsPerEpoch: plan.StepsPerEpoch(),
			RowGroups:     len(plan.ReadSet(a.epoch, slices)),
			Bytes:         plan.Bytes(a.epoch, slices),
		}
		for _, d := range slices {
			pp.StreamRows += plan.StreamLen(d)
		}
		out = append(out, pp)
	}
	return out, nil
}

// printPlanTable prints rep for people.
func printPlanTable(out io.Writer, rep planReport) error {
	w := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintf(w, "dataset\t%d files, %d row groups, %d rows, %s projected (columns %s)\n",
		rep.Files, rep.TotalRowGroups, rep.NumRows, humanBytes(rep.TotalBytes), strings.Join(rep.Columns, ","))
	planned := "footers"
	if rep.Manifest != "" {
		planned = "manifest " + rep.Manifest
	} else if rep.ManifestReason != "" {
		planned += " (" + rep.ManifestReason + ")"
	}
	fmt.Fprintf(w, "planned from\t%s, %d store requests\n", planned, rep.PlanRequests)
	for _, col := range slices.Sorted(maps.Keys(rep.Tokenizers)) {
		fmt.Fprintf(w, "tokenizer\tcolumn %q: sha256 %s\n", col, rep.Tokenizers[col])
	}
	mesh := rep.Mesh
	if rep.Topology != "" {
		mesh += ", topology " + rep.Topology
	}
	axes := strings.Join(rep.BatchAxes, ",")
	if axes == "" {
		axes = "none (replicated)"
	}
	fmt.Fprintf(w, "mesh\t%s: %d devices, %d processes; batch axes %s\n", mesh, rep.Devices, len(rep.Processes), axes)
	fmt.Fprintf(w, "batch\tB=%d rows, D=%d slices of b=%d rows\n", rep.GlobalBatchSize, rep.DataParallel, rep.SliceRows)
	fmt.Fprintf(w, "epoch\t%d steps per epoch (last batch: %s), %d rows dropped, %d padded\n",
		rep.StepsPerEpoch, rep.LastBatch, rep.DroppedRows, rep.PaddedRows)
	switch {
	case !rep.ShuffleRowGroups:
		fmt.Fprintln(w, "shuffle\toff (dataset order)")
	case rep.ShuffleWindow > 0:
		fmt.Fprintf(w, "shuffle\tseed %d: row groups permuted per epoch, rows within %d-row windows\n", rep.Seed, rep.ShuffleWindow)
	default:
		fmt.Fprintf(w, "shuffle\tseed %d: row groups permuted per epoch, rows in order\n", rep.Seed)
	}
	if c := rep.FilterRowGroups; c != nil {
		fmt.Fprintf(w, "filters\t%s: row groups ruled out by the footers %d (by dictionary pages %d, by bloom filters %d), kept whole by them %d, read and evaluated %d\n",
			rep.Filters, c.Pruned, c.DictPruned, c.BloomPruned, c.Whole, c.Evaluated)
		if c.Stored > 0 {
			fmt.Fprintf(w, "filters	selections of %d files stored in the manifest (not counted above)\n", c.Stored)
		}
	}
	fmt.Fprintf(w, "\nepoch %d, per process:\n", rep.Epoch)
	fmt.Fprintln(w, "PROCESS\tDEVICES\tSLICES\tSTEPS\tSTREAM ROWS\tROW GROUPS\tBYTES")
	for _, p := range rep.Processes {
		fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%d\t%d\t%s\n", p.Process, planRanges(p.Devices), planRanges(p.Slices),
			p.StepsPerEpoch, p.StreamRows, p.RowGroups, humanBytes(p.Bytes))
	}
	return w.Flush()
}

// planRanges renders ascending ints compactly: [0 1 2 3 6] -> "0-3,6".
func planRanges(xs []int) string {
	var sb strings.Builder
	for i := 0; i < len(xs); {
		j := i
		for j+1 < len(xs) && xs[j+1] == xs[j]+1 {
			j++
		}
		if sb.Len() > 0 {
			sb.WriteByte(',')
		}
		if j > i {
			fmt.Fprintf(&sb, "%d-%d", xs[i], xs[j])
		} else {
			fmt.Fprintf(&sb, "%d", xs[i])
		}
		i = j + 1
	}
	return sb.String()
}
