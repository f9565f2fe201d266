package feed

import (
	"google.golang.org/grpc/codes"

	"github.com/meshfeed/meshfeed/batching"
	"github.com/meshfeed/meshfeed/filter"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/shape"
	"github.com/meshfeed/meshfeed/transport"
)

// errorCodes maps the sentinels of the packages a Pipeline composes to status
// codes, first match wins: a path that leads out of the server's roots (or
// that a symlink swapped during the open kept from resolving inside them),
// and an object the store's credentials may not read, are PermissionDenied; a malformed glob, a NUL byte in a path and a pattern past
// the glob limits are InvalidArgument; a missing dataset, or a file changed
// or truncated since it was listed or mapped, is NotFound; storage that is
// down for now is Unavailable; a requested column the dataset lacks, and
// shaping or configuration the request got wrong, are InvalidArgument;
// corrupt, mismatched or unsupported files, nulls without a fill, impossible
// plans and data that does not fit the requested shaping are
// FailedPrecondition.
var errorCodes = []transport.ErrorCode{
	{Target: objstore.ErrOutsideRoot, Code: codes.PermissionDenied},
	{Target: objstore.ErrPermission, Code: codes.PermissionDenied},
	{Target: objstore.ErrBadPattern, Code: codes.InvalidArgument},
	{Target: objstore.ErrInvalidPath, Code: codes.InvalidArgument},
	{Target: objstore.ErrGlobLimit, Code: codes.InvalidArgument},
	{Target: loader.ErrColumnNotFound, Code: codes.InvalidArgument},
	{Target: loader.ErrStale, Code: codes.FailedPrecondition},    // a file changed since its manifest
	{Target: loader.ErrManifest, Code: codes.FailedPrecondition}, // a manifest refused
	{Target: objstore.ErrNotFound, Code: codes.NotFound},         // loader.ErrNotFound is the same value
	{Target: loader.ErrCorrupt, Code: codes.FailedPrecondition},
	{Target: loader.ErrSchemaMismatch, Code: codes.FailedPrecondition},
	{Target: loader.ErrNull, Code: codes.FailedPrecondition},
	{Target: loader.ErrUnsupported, Code: codes.FailedPrecondition},
	{Target: objstore.ErrUnsupported, Code: codes.FailedPrecondition},
	{Target: objstore.ErrUnavailable, Code: codes.Unavailable},
	{Target: batching.ErrIndivisible, Code: codes.FailedPrecondition},
	{Target: batching.ErrNoSteps, Code: codes.FailedPrecondition},
	{Target: batching.ErrEmptyDataset, Code: codes.FailedPrecondition},
	{Target: batching.ErrInvalidPosition, Code: codes.FailedPrecondition},
	{Target: batching.ErrInvalidRowGroup, Code: codes.FailedPrecondition},
	{Target: shape.ErrOverflow, Code: codes.FailedPrecondition},
	{Target: shape.ErrTooLong, Code: codes.FailedPrecondition},
	{Target: shape.ErrPackOverflow, Code: codes.FailedPrecondition},
	{Target: shape.ErrNullList, Code: codes.FailedPrecondition},
	{Target: shape.ErrShape, Code: codes.InvalidArgument},
	{Target: batching.ErrInvalidConfig, Code: codes.InvalidArgument},
	{Target: batching.ErrInvalidPolicy, Code: codes.InvalidArgument},
	{Target: batching.ErrMaskColumnExists, Code: codes.InvalidArgument},
	{Target: filter.ErrInvalid, Code: codes.InvalidArgument},
}

var _ transport.ErrorCoder = (*Pipeline)(nil)

// ErrorCodes implements transport.ErrorCoder: the one table from the
// composed packages' errors to status codes.
func (p *Pipeline) ErrorCodes() []transport.ErrorCode { return errorCodes }
