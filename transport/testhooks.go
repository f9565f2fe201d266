package transport

// Hooks for tests in other packages (package feed's end-to-end tests) that
// count how steps went on the wire. They are process-wide; tests that use
// them must not run in parallel with others that send steps.

// Frames returns how many step messages servers of this process have sent
// zero-copy, and how many of those were the virtual concatenation of several
// slices (no bytes copied to join them).
func Frames() (zeroCopy, multi int64) { return zeroCopyFrames.Load(), multiFrames.Load() }

// ForceConcat makes servers of this process join a step's slices by copying
// them into one record (as for columns that cannot be joined virtually),
// when on is true, until the returned function restores the previous
// setting.
func ForceConcat(on bool) (restore func()) {
	old := forceConcat.Swap(on)
	return func() { forceConcat.Store(old) }
}
