package feed

import (
	"google.golang.org/grpc/codes"

	"github.com/meshfeed/meshfeed/batching"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/shape"
	"github.com/meshfeed/meshfeed/transport"
)

// errorCodes maps the sentinels of the packages a Pipeline composes to status
// codes, first match wins: a path that leads out of the server's roots is
// PermissionDenied; a missing dataset is NotFound; storage that is
// down for now is Unavailable; a requested column the dataset lacks, and
// shaping or configuration the request got wrong, are InvalidArgument;
// corrupt, mismatched or unsupported files, nulls without a fill, impossible
// plans and data that does not fit the requested shaping are
// FailedPrecondition.
var errorCodes = []transport.ErrorCode{
	{Target: objstore.ErrOutsideRoot, Code: codes.PermissionDenied},
	{Target: loader.ErrColumnNotFound, Code: codes.InvalidArgument},
	{Target: objstore.ErrNotFound, Code: codes.NotFound}, // loader.ErrNotFound is the same value
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
}

var _ transport.ErrorCoder = (*Pipeline)(nil)

// ErrorCodes implements transport.ErrorCoder: the one table from the
// composed packages' errors to status codes.
func (p *Pipeline) ErrorCodes() []transport.ErrorCode { return errorCodes }
