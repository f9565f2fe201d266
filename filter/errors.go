package filter

import "errors"

// ErrInvalid is wrapped by every error of a predicate that cannot be read or
// does not fit the dataset: malformed JSON, an unknown op, a missing column,
// a value of the wrong kind for its column. Servers map it to
// InvalidArgument.
var ErrInvalid = errors.New("invalid filter")
