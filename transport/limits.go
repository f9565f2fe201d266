package transport

import (
	"context"
	"fmt"
	"math"
	"time"
)

// Bounds on the sizes a ticket names. DecodeRequest refuses a ticket past
// any of them (ErrBadRequest, InvalidArgument) before anything is
// allocated for it; what fits them is then checked against the data and the
// server's configured limits when the request is planned (Limits,
// LimitedBackend).
const (
	// MaxNumSlices bounds num_slices (D) and elastic.from_slices: a plan
	// keeps a few words per slice of the mesh, whichever slices a client
	// asks for.
	MaxNumSlices = 1 << 16
	// MaxGlobalBatchSize bounds global_batch_size (B): one slice's rows are
	// one Arrow record, whose lists have 32-bit offsets.
	MaxGlobalBatchSize = math.MaxInt32
	// MaxListLength bounds a column's length (a fixed_size_list's size is an
	// int32).
	MaxListLength = math.MaxInt32
	// MaxPackRatio bounds a column's pack_ratio.
	MaxPackRatio = 1 << 20
	// MaxShuffleWindow bounds shuffle.window (W), as batching does.
	MaxShuffleWindow = math.MaxInt32
)

// Limits are the server's limits that a request's plan must fit, handed to a
// LimitedBackend by New: a backend refuses at plan time (GetFlightInfo,
// GetSchema and DoGet alike) a request whose step or stream could not fit
// them, with ErrTooLarge and the numbers, instead of failing (or running
// out of memory) while it streams.
type Limits struct {
	// MaxMessageSize is the largest message (one step of one client) the
	// server sends (WithMaxMessageSize).
	MaxMessageSize int64
	// MemoryBudget is the server-wide memory account's limit
	// (WithMemoryBudget); 0 means unbounded.
	MemoryBudget int64
	// Prefetch is the steps each stream queues ahead (WithPrefetch).
	Prefetch int
	// IdleTimeout is how long a stream may wait for its client
	// (WithIdleTimeout; 0: forever); a backend waits no longer than that for
	// room in Memory either.
	IdleTimeout time.Duration
	// Memory is the server-wide memory account: a backend reserves there
	// what a stream holds beside its queued steps (read-ahead, shuffle
	// windows, the step being cut), for the stream's life (Reserve).
	Memory *MemoryAccount
}

// LimitedBackend is implemented by a backend that plans against the
// server's limits (the Pipeline): New calls UseLimits once, before serving
// anything.
type LimitedBackend interface {
	UseLimits(Limits) error
}

// MemoryAccount is the server's one memory account, whose limit is the
// memory budget: the steps queued by every stream (held by the server) and
// what each stream reserves for its life (held by its backend: decoded
// buffers read ahead, shuffle windows, the step being cut, shared-memory
// regions) count against it together. It is safe for concurrent use.
type MemoryAccount struct{ b *budget }

// Limit returns the account's limit in bytes (0: unbounded).
func (m *MemoryAccount) Limit() int64 { return m.b.limit }

// Reserve takes n bytes for a stream's life, waiting while other streams'
// reservations and queued steps leave no room for them, until ctx is done
// (its error is returned). A reservation larger than the whole limit is
// refused at once with ErrTooLarge; one that fits it is granted when no
// other stream holds a reservation, so that it cannot wait forever.
func (m *MemoryAccount) Reserve(ctx context.Context, n int64) error {
	if m == nil || n <= 0 {
		return nil
	}
	if m.b.limit > 0 && n > m.b.limit {
		return fmt.Errorf("transport: %w: a stream needs %d bytes of memory, over the server's memory budget of %d bytes (--memory-budget)", ErrTooLarge, n, m.b.limit)
	}
	return m.b.reserve(ctx, n)
}

// TryReserve takes n bytes if they fit now, and reports whether they did.
func (m *MemoryAccount) TryReserve(n int64) bool {
	if m == nil || n <= 0 {
		return true
	}
	return m.b.tryReserve(n)
}

// Unreserve returns n bytes taken by Reserve or TryReserve.
func (m *MemoryAccount) Unreserve(n int64) {
	if m == nil || n <= 0 {
		return
	}
	m.b.unreserve(n)
}

// InUse returns the bytes held: reservations plus queued steps.
func (m *MemoryAccount) InUse() int64 { return m.b.inUse() }

// force takes n bytes whether they fit or not (what a stream cannot make
// progress without).
func (m *MemoryAccount) force(n int64) {
	if m == nil || n <= 0 {
		return
	}
	m.b.mu.Lock()
	m.b.reserved += n
	m.b.mu.Unlock()
}
