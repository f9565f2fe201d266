package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Version is the ticket version this package speaks. A ticket carries it in
// its "version" field; any other value is refused with ErrBadRequest.
const Version = 1

// MaxTicketBytes is the largest ticket (or CMD FlightDescriptor) accepted;
// longer ones are refused with ErrTicketTooLarge.
const MaxTicketBytes = 64 << 10

// DefaultMaskColumn names the boolean mask column appended with
// last_batch=pad when the request does not name one.
const DefaultMaskColumn = "valid"

// LastBatch is the final-batch policy of a request: what happens to the last
// global batch of an epoch when N % B != 0.
type LastBatch string

const (
	// LastBatchDrop delivers floor(N/B) steps per epoch; the remainder rows
	// are not delivered (PlanInfo.DroppedRows says how many).
	LastBatchDrop LastBatch = "drop"
	// LastBatchPad delivers ceil(N/B) steps; missing rows of the last step are
	// fill values and the mask column says which rows are real.
	LastBatchPad LastBatch = "pad"
	// LastBatchRaise refuses, when the stream is planned, a dataset with
	// N % B != 0.
	LastBatchRaise LastBatch = "raise"
)

// Valid reports whether p is one of the defined policies.
func (p LastBatch) Valid() bool {
	switch p {
	case LastBatchDrop, LastBatchPad, LastBatchRaise:
		return true
	default:
		return false
	}
}

// Column selects one column and says how it is shaped on the wire. Only Name
// is required. The shaping fields are passed to the Backend as they are: the
// transport checks their JSON types and signs, the Backend their meaning.
type Column struct {
	// Name is the column's name in the dataset's schema.
	Name string `json:"name"`
	// DType is the target element dtype ("bfloat16", "float16", "float32",
	// "int32", "int16", ..., "float64"); empty keeps the stored dtype.
	DType string `json:"dtype,omitempty"`
	// Length, when > 0, gives a list column the static length Length.
	Length int `json:"length,omitempty"`
	// Overflow says what happens to a list row longer than Length ("reject",
	// "truncate", ...); empty means the backend's default (reject).
	Overflow string `json:"overflow,omitempty"`
	// Fill is the padding value: a JSON number, or one of the strings "nan",
	// "inf", "-inf". Absent means zero.
	Fill json.RawMessage `json:"fill,omitempty"`
	// PackRatio, when > 0, packs the list column into rows of Length tokens.
	PackRatio float64 `json:"pack_ratio,omitempty"`
	// Tokenizer, when set, is the path or URI of a tokenizer.json (read by
	// the server like data, under its roots): the column, a string or
	// large_string, arrives as each row's token ids (list<int32>) and is
	// then shaped as a list column. Optional in ticket version 1.
	Tokenizer string `json:"tokenizer,omitempty"`
	// AddSpecialTokens says whether the tokenizer's post-processor adds its
	// special tokens (as the reference's encode(add_special_tokens=...));
	// absent means true. Only with Tokenizer.
	AddSpecialTokens *bool `json:"add_special_tokens,omitempty"`
	// Pack "concat" packs the column's documents by concatenation (each
	// followed by the end-of-document token, the sequence cut into rows of
	// exactly Length tokens; needs a tokenizer); empty: no such packing.
	Pack string `json:"pack,omitempty"`
	// EODToken names the end-of-document token of Pack "concat" (a token of
	// the tokenizer); empty: the first of its special tokens that is a usual
	// one (<|endoftext|>, <|end_of_text|>, </s>, <eos>, [SEP]).
	EODToken string `json:"eod_token,omitempty"`
}

// AddSpecial returns whether the column's tokenizer adds its special
// tokens: AddSpecialTokens, true when absent.
func (c Column) AddSpecial() bool { return c.AddSpecialTokens == nil || *c.AddSpecialTokens }

// Shuffle configures shuffling.
type Shuffle struct {
	// Enabled permutes row groups per epoch (seeded by seed and epoch).
	Enabled bool `json:"enabled"`
	// Window, when > 0, also permutes rows inside windows of Window rows of
	// each stream. It needs Enabled.
	Window int `json:"window,omitempty"`
}

// Position is a point in the global step sequence.
type Position struct {
	// Epoch counts from 0.
	Epoch int `json:"epoch"`
	// Step counts from 0 within the epoch.
	Step int `json:"step"`
}

// Elastic says that a run switched data-parallel degree inside an epoch
// (elastic resume, docs/CONTRACT-elastic.md): steps [0, Step) of epoch Epoch
// were delivered with num_slices = FromSlices, and the rest of that epoch is
// delivered re-split over the request's NumSlices (same global batch size),
// before the plain plan with NumSlices from epoch Epoch+1 on.
type Elastic struct {
	// FromSlices is D before the switch (> 0, a divisor of B).
	FromSlices int `json:"from_slices"`
	// Epoch is the epoch of the switch.
	Epoch int `json:"epoch"`
	// Step is the number of steps of Epoch delivered before the switch.
	Step int `json:"step"`
}

// Request is the versioned ticket of DoGet and the command of GetFlightInfo:
// everything that decides which rows this client receives. Its JSON form is
// documented in docs/PROTOCOL.md; build it with DecodeRequest, or fill it and
// call Encode.
type Request struct {
	// Version must be 1 (the Version constant).
	Version int `json:"version"`
	// Datasets are the dataset URIs or glob patterns (gs://bucket/path or
	// absolute local paths); at least one.
	Datasets []string `json:"datasets"`
	// Manifest says where the datasets' manifest is: "" or "auto" (the
	// default) plans from _meshfeed_manifest.parquet in the datasets'
	// directory when it is there, "off" reads every footer, anything else
	// is the manifest's URI (which must exist, be under an allowed root,
	// and name the datasets' files).
	Manifest string `json:"manifest,omitempty"`
	// Columns projects and shapes columns, in output order; empty means every
	// column unshaped.
	Columns []Column `json:"columns,omitempty"`
	// GlobalBatchSize is B, rows per global step (> 0).
	GlobalBatchSize int `json:"global_batch_size"`
	// NumSlices is D, the data-parallel degree (> 0, B % D == 0).
	NumSlices int `json:"num_slices"`
	// Slices are the slices this client needs: ascending, distinct, each in
	// [0, NumSlices); at least one.
	Slices []int `json:"slices"`
	// Seed seeds every permutation.
	Seed uint64 `json:"seed,omitempty"`
	// Shuffle configures shuffling; absent means off.
	Shuffle Shuffle `json:"shuffle,omitzero"`
	// LastBatch is the final-batch policy; required.
	LastBatch LastBatch `json:"last_batch"`
	// MaskColumn names the boolean mask column with last_batch=pad; empty
	// means DefaultMaskColumn.
	MaskColumn string `json:"mask_column,omitempty"`
	// Epochs is the number of epochs to stream; 0 means unbounded.
	Epochs int `json:"epochs,omitempty"`
	// Start is the first position streamed (default epoch 0, step 0).
	Start Position `json:"start,omitzero"`
	// Elastic, when set, resumes across a change of data-parallel degree;
	// absent (the default) means none. Optional in ticket version 1: servers
	// that predate it refuse it as an unknown field.
	Elastic *Elastic `json:"elastic,omitempty"`
	// Filters keeps only the rows a predicate matches, in pyarrow's
	// filters form (docs/PROTOCOL.md, "Filters"); absent keeps every row.
	// The transport checks only that it is a JSON list; the Backend parses
	// it. Optional in ticket version 1: servers that predate it refuse it as
	// an unknown field.
	Filters json.RawMessage `json:"filters,omitempty"`
	// Mixture, when set, reads a weighted mixture of datasets instead of
	// Datasets (mixture.go). Optional in ticket version 1.
	Mixture *Mixture `json:"mixture,omitempty"`
}

// SliceRows returns b = B / D, the rows of one slice.
func (r *Request) SliceRows() int {
	if r.NumSlices <= 0 {
		return 0
	}
	return r.GlobalBatchSize / r.NumSlices
}

// Mask returns the mask column's name (MaskColumn or DefaultMaskColumn).
func (r *Request) Mask() string {
	if r.MaskColumn == "" {
		return DefaultMaskColumn
	}
	return r.MaskColumn
}

// DecodeRequest decodes and validates a ticket. Decoding is strict: unknown
// fields, trailing data, a missing or unsupported version and tickets longer
// than MaxTicketBytes are errors. Validation reports every problem at once.
// Every error wraps ErrBadRequest or ErrTicketTooLarge.
func DecodeRequest(data []byte) (*Request, error) {
	if len(data) > MaxTicketBytes {
		return nil, fmt.Errorf("transport: ticket of %d bytes: %w (limit %d bytes)", len(data), ErrTicketTooLarge, MaxTicketBytes)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("transport: %w: empty ticket (want a JSON object with \"version\": %d)", ErrBadRequest, Version)
	}
	// Check the version first, leniently, so that a ticket from a newer
	// client is told about the version, not about a field it does not know.
	var head struct {
		Version *int `json:"version"`
	}
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&head); err != nil {
		return nil, fmt.Errorf("transport: %w: ticket is not a JSON object: %v", ErrBadRequest, err)
	}
	if head.Version == nil {
		return nil, fmt.Errorf("transport: %w: ticket has no \"version\" field (want %d)", ErrBadRequest, Version)
	}
	if *head.Version != Version {
		return nil, fmt.Errorf("transport: %w: ticket version %d is not supported (this server speaks version %d)", ErrBadRequest, *head.Version, Version)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var r Request
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("transport: %w: %v", ErrBadRequest, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("transport: %w: trailing data after the ticket's JSON object", ErrBadRequest)
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// Encode returns the ticket's JSON form. It does not validate.
func (r *Request) Encode() ([]byte, error) {
	return json.Marshal(r)
}

// Validate reports every problem of the request at once, in one error
// wrapping ErrBadRequest. It checks the request on its own; whether its URIs
// lie under the server's roots and whether the plan fits the dataset are
// checked by the server and the Backend.
//
// Length: one flat list of independent checks, each a line or two, so that
// every problem of a ticket is reported at once.
func (r *Request) Validate() error {
	var p problems
	if r.Version != Version {
		p.add("version is %d, want %d", r.Version, Version)
	}
	if len(r.Datasets) == 0 && r.Mixture == nil {
		p.add("datasets is empty: name at least one dataset URI")
	}
	seenURI := make(map[string]bool, len(r.Datasets))
	for i, u := range r.Datasets {
		switch {
		case u == "":
			p.add("datasets[%d] is empty", i)
		case seenURI[u]:
			p.add("datasets[%d] %q is listed twice", i, u)
		}
		seenURI[u] = true
	}
	if bytes.IndexByte([]byte(r.Manifest), 0) >= 0 {
		p.add("manifest %q holds a NUL byte", r.Manifest)
	}
	seenCol := r.validateColumns(&p)
	if r.GlobalBatchSize <= 0 {
		p.add("global_batch_size %d must be > 0", r.GlobalBatchSize)
	}
	if r.NumSlices <= 0 {
		p.add("num_slices %d must be > 0", r.NumSlices)
	}
	if r.GlobalBatchSize > MaxGlobalBatchSize {
		p.add("global_batch_size %d is over the limit of %d rows", r.GlobalBatchSize, MaxGlobalBatchSize)
	}
	if r.NumSlices > MaxNumSlices {
		p.add("num_slices %d is over the limit of %d", r.NumSlices, MaxNumSlices)
	}
	if r.GlobalBatchSize > 0 && r.NumSlices > 0 && r.GlobalBatchSize%r.NumSlices != 0 {
		p.add("global_batch_size %d is not a multiple of num_slices %d (remainder %d)", r.GlobalBatchSize, r.NumSlices, r.GlobalBatchSize%r.NumSlices)
	}
	if len(r.Slices) == 0 {
		p.add("slices is empty: name at least one slice in [0, num_slices)")
	}
	for i, s := range r.Slices {
		if s < 0 || (r.NumSlices > 0 && s >= r.NumSlices) {
			p.add("slices[%d] = %d is out of range [0, %d)", i, s, r.NumSlices)
		}
		if i > 0 && s == r.Slices[i-1] {
			p.add("slices[%d] = %d is a duplicate", i, s)
		} else if i > 0 && s < r.Slices[i-1] {
			p.add("slices[%d] = %d is less than slices[%d] = %d: slices must be ascending", i, s, i-1, r.Slices[i-1])
		}
	}
	if r.Shuffle.Window < 0 {
		p.add("shuffle.window %d is negative", r.Shuffle.Window)
	}
	if r.Shuffle.Window > MaxShuffleWindow {
		p.add("shuffle.window %d is over the limit of %d rows", r.Shuffle.Window, MaxShuffleWindow)
	}
	if r.Shuffle.Window > 0 && !r.Shuffle.Enabled {
		p.add("shuffle.window is %d but shuffle.enabled is false", r.Shuffle.Window)
	}
	switch {
	case r.LastBatch == "":
		p.add("last_batch is missing: want one of \"drop\", \"pad\", \"raise\"")
	case !r.LastBatch.Valid():
		p.add("last_batch %q is unknown: want one of \"drop\", \"pad\", \"raise\"", string(r.LastBatch))
	}
	if r.MaskColumn != "" && r.LastBatch != LastBatchPad && r.LastBatch.Valid() {
		p.add("mask_column %q is set but last_batch is %q (a mask is only added with \"pad\")", r.MaskColumn, string(r.LastBatch))
	}
	if r.LastBatch == LastBatchPad && seenCol[r.Mask()] {
		p.add("mask column %q clashes with a selected column: choose another mask_column", r.Mask())
	}
	if r.Epochs < 0 {
		p.add("epochs %d is negative (0 means unbounded)", r.Epochs)
	}
	if r.Start.Epoch < 0 {
		p.add("start.epoch %d is negative", r.Start.Epoch)
	}
	if r.Start.Step < 0 {
		p.add("start.step %d is negative", r.Start.Step)
	}
	if r.Epochs > 0 && r.Start.Epoch >= r.Epochs {
		p.add("start.epoch %d is not below epochs %d", r.Start.Epoch, r.Epochs)
	}
	r.validateElastic(&p)
	r.validateMixture(&p)
	return p.err("transport", ErrBadRequest)
}

// validateColumns adds the problems of r.Columns to p and returns the set of
// column names.
func (r *Request) validateColumns(p *problems) map[string]bool {
	seenCol := make(map[string]bool, len(r.Columns))
	for i, c := range r.Columns {
		if c.Name == "" {
			p.add("columns[%d].name is empty", i)
		} else if seenCol[c.Name] {
			p.add("columns[%d] %q is listed twice", i, c.Name)
		}
		seenCol[c.Name] = true
		if c.Length < 0 {
			p.add("columns[%d] %q: length %d is negative", i, c.Name, c.Length)
		} else if c.Length > MaxListLength {
			p.add("columns[%d] %q: length %d is over the limit of %d", i, c.Name, c.Length, MaxListLength)
		}
		if c.PackRatio < 0 {
			p.add("columns[%d] %q: pack_ratio %v is negative", i, c.Name, c.PackRatio)
		} else if c.PackRatio > MaxPackRatio {
			p.add("columns[%d] %q: pack_ratio %v is over the limit of %d", i, c.Name, c.PackRatio, MaxPackRatio)
		}
		if c.Pack != "" && c.Pack != "concat" {
			p.add("columns[%d] %q: pack %q is unknown (want \"concat\", or none)", i, c.Name, c.Pack)
		}
		if c.EODToken != "" && c.Pack != "concat" {
			p.add("columns[%d] %q: eod_token goes with pack \"concat\" only", i, c.Name)
		}
		if _, err := ParseFill(c.Fill); len(c.Fill) > 0 && err != nil {
			p.add("columns[%d] %q: fill %s is neither a number nor one of \"nan\", \"inf\", \"-inf\"", i, c.Name, c.Fill)
		}
		if strings.IndexByte(c.Tokenizer, 0) >= 0 {
			p.add("columns[%d] %q: tokenizer %q holds a NUL byte", i, c.Name, c.Tokenizer)
		}
		if c.AddSpecialTokens != nil && c.Tokenizer == "" {
			p.add("columns[%d] %q: add_special_tokens is set without a tokenizer", i, c.Name)
		}
	}
	return seenCol
}

// Tokenizers returns the tokenizer URIs the request names (its columns' and
// its mixture sources' columns'), for the roots check.
func (r *Request) Tokenizers() []string {
	var out []string
	add := func(cols []Column) {
		for _, c := range cols {
			if c.Tokenizer != "" {
				out = append(out, c.Tokenizer)
			}
		}
	}
	add(r.Columns)
	if r.Mixture != nil {
		for _, s := range r.Mixture.Sources {
			add(s.Columns)
		}
	}
	return out
}

// FillKind is how a ticket's fill value was written.
type FillKind uint8

const (
	// FillInt is an integer literal that fits int64.
	FillInt FillKind = iota + 1
	// FillUint is an integer literal above math.MaxInt64 that fits uint64.
	FillUint
	// FillFloat is any other number, or "nan", "inf", "-inf".
	FillFloat
)

// Fill is a column's fill value as the ticket gives it: integer literals
// stay exact integers.
type Fill struct {
	Kind  FillKind
	Int   int64
	Uint  uint64
	Float float64 // the value as a float64, whatever the kind
}

// ParseFill parses a ticket's fill: a JSON number, or one of the strings
// "nan", "inf", "-inf". It is the one parser of fills: Validate uses it, and
// so do backends.
func ParseFill(raw json.RawMessage) (Fill, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		switch s {
		case "nan":
			return Fill{Kind: FillFloat, Float: math.NaN()}, nil
		case "inf":
			return Fill{Kind: FillFloat, Float: math.Inf(1)}, nil
		case "-inf":
			return Fill{Kind: FillFloat, Float: math.Inf(-1)}, nil
		}
		return Fill{}, fmt.Errorf("fill %q: want a number, \"nan\", \"inf\" or \"-inf\"", s)
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		return Fill{}, fmt.Errorf("fill %s: want a number, \"nan\", \"inf\" or \"-inf\"", raw)
	}
	if i, err := strconv.ParseInt(n.String(), 10, 64); err == nil {
		return Fill{Kind: FillInt, Int: i, Float: float64(i)}, nil
	}
	if u, err := strconv.ParseUint(n.String(), 10, 64); err == nil {
		return Fill{Kind: FillUint, Uint: u, Float: float64(u)}, nil
	}
	f, err := n.Float64()
	if err != nil {
		return Fill{}, fmt.Errorf("fill %s: %v", raw, err)
	}
	return Fill{Kind: FillFloat, Float: f}, nil
}

// validateElastic adds the problems of the elastic field.
func (r *Request) validateElastic(p *problems) {
	e := r.Elastic
	if e == nil {
		return
	}
	if e.FromSlices <= 0 {
		p.add("elastic.from_slices %d must be > 0", e.FromSlices)
	} else if e.FromSlices > MaxNumSlices {
		p.add("elastic.from_slices %d is over the limit of %d", e.FromSlices, MaxNumSlices)
	} else if r.GlobalBatchSize > 0 && r.GlobalBatchSize%e.FromSlices != 0 {
		p.add("elastic.from_slices %d does not divide global_batch_size %d (the global batch size stays the same across the switch)", e.FromSlices, r.GlobalBatchSize)
	}
	if e.Epoch < 0 || e.Step < 0 {
		p.add("elastic epoch %d step %d must be >= 0", e.Epoch, e.Step)
	}
	if r.Start.Epoch < e.Epoch || (r.Start.Epoch == e.Epoch && r.Start.Step < e.Step) {
		p.add("start (epoch %d, step %d) is before the elastic switch (epoch %d, step %d): the steps before it were delivered with num_slices %d",
			r.Start.Epoch, r.Start.Step, e.Epoch, e.Step, e.FromSlices)
	}
}
