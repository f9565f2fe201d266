package batching

import "errors"

// Sentinel errors of the planning core. Errors returned by this package wrap
// them with context (the values involved and what to do); test with errors.Is.
var (
	// ErrInvalidConfig: a Config field is out of range (B, D, W, policy). The
	// error of Config.Validate lists every problem at once.
	ErrInvalidConfig = errors.New("batching: invalid config")
	// ErrInvalidPolicy: a policy name other than drop, pad or raise.
	ErrInvalidPolicy = errors.New("batching: invalid last-batch policy")
	// ErrInvalidRowGroup: a row group with a negative row or byte count.
	ErrInvalidRowGroup = errors.New("batching: invalid row group")
	// ErrEmptyDataset: the dataset has no rows.
	ErrEmptyDataset = errors.New("batching: dataset has no rows")
	// ErrIndivisible: policy raise and N is not a multiple of B.
	ErrIndivisible = errors.New("batching: rows not a multiple of the global batch size")
	// ErrNoSteps: the plan would have zero steps per epoch (drop with N < B).
	ErrNoSteps = errors.New("batching: no steps per epoch")
	// ErrInvalidPosition: an epoch, step or stream outside the plan.
	ErrInvalidPosition = errors.New("batching: invalid position")
	// ErrUnexpectedSegment: a cutter was pushed a segment other than the next
	// one of its stream, or a record whose row count fits neither the row group
	// nor the segment.
	ErrUnexpectedSegment = errors.New("batching: unexpected segment")
	// ErrSchemaMismatch: records pushed to one cutter have different schemas.
	ErrSchemaMismatch = errors.New("batching: schema mismatch")
	// ErrMaskColumnExists: the data already has a column named like the mask.
	ErrMaskColumnExists = errors.New("batching: mask column name already used")
	// ErrNoSchema: a cutter must produce an all-padding slice before any record
	// arrived and was given no schema (WithSchema).
	ErrNoSchema = errors.New("batching: schema unknown")
	// ErrCutterClosed: a cutter was used after Release.
	ErrCutterClosed = errors.New("batching: cutter released")
)

// Sentinel errors of mixtures (compose.go, mixture.go).
var (
	// ErrInvalidWeights: mixture weights that are negative, NaN, infinite,
	// all zero, or spans that do not fit the sources.
	ErrInvalidWeights = errors.New("batching: invalid mixture weights")
	// ErrInvalidMixture: a mixture whose sources or stop rule cannot be
	// planned (a source with fewer rows than slices, a stop that never comes).
	ErrInvalidMixture = errors.New("batching: invalid mixture")
	// ErrComposition: the composition could not meet its bound (a bug).
	ErrComposition = errors.New("batching: mixture composition failed")
)
