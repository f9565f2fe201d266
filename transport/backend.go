package transport

import (
	"context"

	"github.com/apache/arrow-go/v18/arrow"
)

// StepMeta is the app_metadata of each DoGet message after the schema, sent as
// JSON: {"epoch":0,"step":3,"slices":[0,1],"real_rows":[4,4]}.
type StepMeta struct {
	// Epoch of this step, from 0.
	Epoch int `json:"epoch"`
	// Step within the epoch, from 0.
	Step int `json:"step"`
	// Slices are the slices in this message, ascending; the record holds
	// b = B / D rows of each, in this order.
	Slices []int `json:"slices"`
	// RealRows gives, per entry of Slices, how many of its b rows are real
	// data (the rest are padding, false in the mask column).
	RealRows []int `json:"real_rows"`
}

// PlanInfo is what GetFlightInfo answers: the output schema and the plan,
// computed from metadata alone. Its JSON form is the FlightInfo's
// app_metadata.
type PlanInfo struct {
	// Schema is the schema of every record of the stream (with the mask column
	// when last_batch is pad). It travels in FlightInfo.schema, not in the
	// JSON.
	Schema *arrow.Schema `json:"-"`
	// NumRows is N, the dataset's rows.
	NumRows int64 `json:"num_rows"`
	// StepsPerEpoch is the number of global steps of every epoch.
	StepsPerEpoch int64 `json:"steps_per_epoch"`
	// DroppedRows is the rows per epoch not delivered (last_batch=drop).
	DroppedRows int64 `json:"dropped_rows"`
	// PaddedRows is the padding rows per epoch (last_batch=pad).
	PaddedRows int64 `json:"padded_rows"`
}

// Stream produces one client's steps in order. The server calls Next from a
// single goroutine and then Close exactly once, after the last Next returned,
// whether the stream ended, failed or was cancelled.
type Stream interface {
	// Schema is the schema of every record Next returns.
	Schema() *arrow.Schema
	// Next returns the next step: its record (the request's slices in
	// ascending order, concatenated) and its metadata. It returns io.EOF after
	// the last step. The caller owns the record and releases it once sent.
	// Next must return promptly (with ctx's error) when ctx is cancelled.
	Next(ctx context.Context) (arrow.RecordBatch, StepMeta, error)
	// Close releases what the stream holds.
	Close() error
}

// Backend plans and opens streams; it is implemented by the pipeline (loader
// and batching). Requests reaching it are validated and their URIs lie under
// the server's roots. Its errors should wrap this package's sentinels, or
// ones registered with WithErrorCode, so that they reach the client with the
// right status code.
type Backend interface {
	// Info answers GetFlightInfo: schema, row count and steps per epoch.
	Info(ctx context.Context, req *Request) (*PlanInfo, error)
	// Open starts the stream of a DoGet.
	Open(ctx context.Context, req *Request) (Stream, error)
}

// RootedBackend is implemented by backends that open local files
// themselves, such as the Pipeline. New hands them the server's local allowed
// roots (absolute, cleaned) before it serves anything, so that every local
// path a request names, and every file its globs and directories expand to,
// is resolved and opened inside its root (loader.WithRoots, os.Root): the
// server's own check of a request's URIs is lexical, and cannot see symlinks.
// UseRoots returns an error when the backend cannot confine itself to roots;
// New then fails.
type RootedBackend interface {
	UseRoots(roots []string) error
}
