package shard

import "errors"

// Sentinel errors. Every error this package returns wraps one of these (test
// with errors.Is) and names the offending values.
var (
	// ErrInvalidMesh: a Mesh is malformed: no axes, an empty or repeated axis
	// name, a non-positive axis size, a device count that differs from the
	// product of the shape, a device listed twice, a negative device or
	// process id, or Process not parallel to Devices.
	ErrInvalidMesh = errors.New("invalid mesh")
	// ErrUnknownAxis: a batch axis that is not an axis of the mesh.
	ErrUnknownAxis = errors.New("unknown mesh axis")
	// ErrDuplicateAxis: a batch axis listed more than once.
	ErrDuplicateAxis = errors.New("batch axis listed twice")
	// ErrBatchSize: a global batch size B that is not positive or not a
	// multiple of the data-parallel degree D.
	ErrBatchSize = errors.New("invalid global batch size")
	// ErrUnknownDevice: a device id that is not in the mesh.
	ErrUnknownDevice = errors.New("device not in mesh")
	// ErrUnknownProcess: a process index that owns no device of the mesh.
	ErrUnknownProcess = errors.New("process owns no device of mesh")
	// ErrInvalidTopology: a topology spec or chips-per-host value that cannot
	// describe a slice, or a mesh shape that does not fit its devices.
	ErrInvalidTopology = errors.New("invalid topology")
)
