package datagen

import "errors"

// ErrInvalidSpec is returned (wrapped, naming every problem) by Spec.Validate
// and Write when a Spec cannot describe a dataset.
var ErrInvalidSpec = errors.New("datagen: invalid spec")

// ErrUnknownValue is returned (wrapped, naming the valid values) by
// ParseFormat and ParseCompression for a name they do not know.
var ErrUnknownValue = errors.New("datagen: unknown value")
