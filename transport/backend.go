package transport

import (
	"context"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"
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
	// Manifest is the dataset manifest planning used ("" when it read the
	// footers), ManifestReason why none served where one was looked for,
	// and PlanRequests the store requests planning made.
	Manifest       string `json:"manifest,omitempty"`
	ManifestReason string `json:"manifest_reason,omitempty"`
	PlanRequests   int64  `json:"plan_requests,omitempty"`
	// Tokenizers maps each tokenized column to the SHA-256 (hex) of its
	// tokenizer.json, as the server read it for this plan (absent: no
	// tokenized column). A client keeps it in its state's fingerprint.
	Tokenizers map[string]string `json:"tokenizers,omitempty"`
	// Mixture describes a mixture's sources (absent otherwise);
	// StepsPerEpoch is then the mixture's steps and NumRows the sum of the
	// sources' rows.
	Mixture *MixtureInfo `json:"mixture,omitempty"`
}

// MixtureInfo is the plan of a mixture's sources.
type MixtureInfo struct {
	// Sources describes each source, in the request's order.
	Sources []MixtureSourceInfo `json:"sources"`
}

// MixtureSourceInfo is one source of a mixture's plan.
type MixtureSourceInfo struct {
	// Rows is the source's rows (one source epoch).
	Rows int64 `json:"rows"`
	// DeliveredRows is the source's real rows over the mixture's steps.
	DeliveredRows int64 `json:"delivered_rows"`
	// Weight is the source's current weight.
	Weight float64 `json:"weight"`
	// Seed is the seed of the source's permutations.
	Seed uint64 `json:"seed"`
	// Tokenizers is PlanInfo.Tokenizers for this source's columns (names
	// as in its files).
	Tokenizers map[string]string `json:"tokenizers,omitempty"`
}

// Step is one step of one client: its rows as records of the stream's schema,
// in ascending slice order (usually one record per slice of Meta.Slices; a
// backend may hand them already joined), and its metadata. How the records
// travel (one Flight message, concatenated or not; a shared-memory region) is
// the transport's business, not the backend's.
type Step struct {
	// Slices are the step's records, in slice order. Their rows, back to
	// back, are the step: b rows of each slice of Meta.Slices.
	Slices []arrow.RecordBatch
	// Meta is the step's app_metadata.
	Meta StepMeta
}

// Release releases the step's records.
func (s Step) Release() {
	for _, r := range s.Slices {
		if r != nil {
			r.Release()
		}
	}
}

// Rows returns the step's rows: the sum of its records' rows.
func (s Step) Rows() int64 {
	var n int64
	for _, r := range s.Slices {
		n += r.NumRows()
	}
	return n
}

// Stream produces one client's steps in order. The server calls Next from a
// single goroutine and then Close exactly once, after the last Next returned,
// whether the stream ended, failed or was cancelled.
type Stream interface {
	// Schema is the schema of every record Next returns.
	Schema() *arrow.Schema
	// Next returns the next step: its records (the request's slices in
	// ascending order) and its metadata. It returns io.EOF after the last
	// step. The caller owns the records and releases them once sent. Next
	// must return promptly (with ctx's error) when ctx is cancelled. A panic
	// in Next ends the stream with an error naming the step; the server
	// then calls Close.
	Next(ctx context.Context) (Step, error)
	// Close releases what the stream holds.
	Close() error
}

// Backend plans and opens streams; package feed implements it over real
// datasets (loader, batching, shape), DemoBackend over synthetic rows. Requests reaching it are validated and their URIs lie under
// the server's roots. Its errors should wrap this package's sentinels, or
// ones registered with WithErrorCode, so that they reach the client with the
// right status code.
type Backend interface {
	// Info answers GetFlightInfo: schema, row count and steps per epoch.
	Info(ctx context.Context, req *Request) (*PlanInfo, error)
	// Open starts the stream of a DoGet.
	Open(ctx context.Context, req *Request) (Stream, error)
}

// AllocatingBackend is implemented by a Backend whose streams can take their
// records' memory from an allocator the server hands them: the
// shared-memory wire opens its streams with an allocator over a region the
// client maps (an arena), so that the bytes a stream decodes or gathers there
// reach the client without another copy. Records must hold only memory from
// mem, the Backend's own caches excepted: the server may keep a step's
// records until the client releases the step.
type AllocatingBackend interface {
	Backend
	// OpenWith is Open with the stream's records allocated from mem.
	OpenWith(ctx context.Context, req *Request, mem memory.Allocator) (Stream, error)
}

// ErrorCode maps every error that errors.Is Target to the gRPC status Code.
type ErrorCode struct {
	Target error
	Code   codes.Code
}

// ErrorCoder is implemented by a Backend whose errors wrap sentinels of its
// own packages: the server consults ErrorCodes (in order, first match wins)
// before its own sentinels, when it maps an error to a status code at its
// edge. It is the one place where a backend's errors meet status codes.
type ErrorCoder interface {
	ErrorCodes() []ErrorCode
}

// StorageStats are the storage counters a backend reports, which the server
// exports as meshfeed_storage_* metrics.
type StorageStats struct {
	BytesRead int64 `json:"bytes_read"` // bytes returned by successful reads
	Reads     int64 `json:"reads"`      // successful reads
	Retries   int64 `json:"retries"`    // requests re-issued after a failed one, resumes included
	Resumes   int64 `json:"resumes"`    // retries that continued a ranged read past the bytes already received

	// The counters of a local disk cache of remote bytes in front of the
	// storage (`serve --cache-dir`); zero without one. Reads and BytesRead
	// count only what was read from the storage itself.
	CacheHits        int64 `json:"cache_hits"`         // cache blocks read that needed no storage request
	CacheMisses      int64 `json:"cache_misses"`       // cache blocks fetched from the storage
	CacheBytesSaved  int64 `json:"cache_bytes_saved"`  // bytes served by cache hits instead of the storage
	CacheEvictions   int64 `json:"cache_evictions"`    // entries removed to keep the cache within its size
	CacheCorrupt     int64 `json:"cache_corrupt"`      // entries found corrupt on read, removed and fetched again
	CacheWriteErrors int64 `json:"cache_write_errors"` // fetched blocks the cache could not write (disk full)
}

// StatsReporter is implemented by a Backend that counts its storage work.
// StorageStats reports false when its storage counts nothing. It is called
// from the metrics handler, concurrently with streams.
type StatsReporter interface {
	StorageStats() (StorageStats, bool)
}

// RootedBackend is implemented by backends that open local files
// themselves, such as the Pipeline. New hands them the server's local allowed
// roots (absolute, cleaned) before it serves anything, so that every local
// path a request names, and every file its globs and directories expand to,
// is resolved and opened inside its root (objstore.WithRoots, os.Root): the
// server's own check of a request's URIs is lexical, and cannot see symlinks.
// UseRoots returns an error when the backend cannot confine itself to roots;
// New then fails.
type RootedBackend interface {
	UseRoots(roots []string) error
}
