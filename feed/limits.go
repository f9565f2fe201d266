package feed

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/meshfeed/meshfeed/shape"
	"github.com/meshfeed/meshfeed/transport"
)

// The server's limits, checked when a request is planned.
//
// Every size a request names is checked once before anything is allocated
// for it: the ticket's own bounds by the transport's decoder
// (transport.MaxNumSlices, ...), then, here, what the plan needs on this
// dataset against the server's limits (transport.Limits, handed over by
// UseLimits): a step's bytes (this client's slices of b rows, or packed
// rows, at the output schema's bytes per row: exact for fixed-width columns,
// a fixed-length list's length included; the dataset's decoded bytes per row
// for the others) against the max message size, and what the stream holds
// for its life (its reservation) plus one step against the memory budget.
// GetFlightInfo, GetSchema and DoGet run the same checks (planFor), so a
// plan that Info accepts is one that Open does not refuse for its size.
//
// A stream's reservation is what it holds beside its queued steps (which
// the server counts itself), taken from the server's memory account when it
// opens (waiting while other streams hold the account, for at most the
// server's idle timeout: then transport.ErrTooManyStreams, retry later) and
// returned when it closes:
//
//   - the read-ahead its readers may hold: the read-ahead budget (each
//     slice's readers at least one shuffle window of rows read ahead), or
//     with a read-ahead of 0 one row group per slice (also in an elastic
//     epoch, which reads whole row groups); never more than the dataset's
//     compressed plus decoded bytes; plus, where the stream's slices read
//     pieces, the pages of row groups shared by neighbouring slices, fetched
//     once (piecePlan.shareBytes);
//   - the shuffle window's rows each slice holds (W rows at the dataset's
//     decoded bytes per row, at most a stream's rows; under concatenated
//     packing its documents' tokens, plus the ids of one row group, and
//     the ids in flight twice: the next epoch's readers open early);
//   - sliceOverhead per slice (its reader, cutter and decode workers);
//   - two steps: the one being cut and shaped, and its input;
//   - with tokenized columns, the ids of the row groups in flight
//     (tokensAhead), and rows held (windows, steps of unshaped lists)
//     counted at their tokenized size (tokenRowBytes): at most one id of 4
//     bytes per byte of text plus the tokenizer's specials
//     (tokenizer_plan.go says when that bound is exact).

// sliceOverhead is what one slice of a stream costs beside its share of the
// read-ahead and its window: its reader's and cutter's state, decode
// workers and their buffers (measured: about 1.15 MB per slice of one row).
const sliceOverhead = 1 << 20

var _ transport.LimitedBackend = (*Pipeline)(nil)

// UseLimits implements transport.LimitedBackend: plans are checked against
// l, and streams reserve their memory in l.Memory.
func (p *Pipeline) UseLimits(l transport.Limits) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.limits = l
	return nil
}

// serverLimits returns the limits UseLimits set (zero: none).
func (p *Pipeline) serverLimits() transport.Limits {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.limits
}

// planSize is what a plan needs of the server's limits.
type planSize struct {
	rows      int64   // rows of one slice on the wire (b, or packed rows)
	rowBytes  float64 // bytes per row on the wire
	step      float64 // bytes of one step of this client
	readAhead float64 // the readers' share of the reservation
	window    float64 // shuffle windows held
	tokens    float64 // ids of the row groups in flight (tokenized columns)
	overhead  float64 // slices x sliceOverhead
	reserve   float64 // what the stream reserves: the above plus two steps
}

// sizeOf computes what pl needs, in float64 so that no product of a
// request's sizes overflows.
func (p *Pipeline) sizeOf(pl *pipelinePlan) planSize {
	n := float64(len(pl.cfg.slices))
	var sz planSize
	sz.rows = int64(pl.plan.SliceRows())
	for _, c := range pl.cfg.shaping {
		if c.PackRatio > 0 {
			sz.rows = int64(shape.PackedRows(pl.plan.SliceRows(), c.PackRatio))
			break
		}
	}
	varRow := tokenRowBytes(pl.toks, pl.ds.ArrowRowBytes())
	sz.rowBytes = schemaRowBytes(pl.schema, varRow)
	sz.step = n * float64(sz.rows) * sz.rowBytes

	var total, maxRG float64
	for _, f := range pl.ds.Files {
		for _, m := range f.RowGroups {
			b := float64(m.Bytes + m.DecodedBytes)
			total += b
			maxRG = max(maxRG, b)
		}
	}
	ra := float64(p.cfg.readAhead)
	if ra <= 0 {
		ra = n * maxRG
	} else if pl.pieces.windowAhead > 0 {
		ra = max(ra, n*float64(pl.pieces.windowAhead))
	}
	if pl.rem != nil {
		ra = max(ra, n*maxRG)
	}
	sz.readAhead = min(ra, total) + float64(pl.pieces.shareBytes)
	sz.tokens = tokensAhead(pl.toks, pl.ds, min(ra, total))
	if w := pl.cfg.plan.Window; w > 0 {
		streamRows := float64(pl.plan.N())/float64(pl.cfg.plan.D) + 1
		sz.window = n * min(float64(w), streamRows) * varRow
		if c := pl.concat; c != nil { // every slice holds windows of the one document sequence, tokenized
			sz.window = n * min(float64(w), float64(c.plan.N())) * (4*float64(c.plan.Tokens())/float64(c.plan.N()) + 8)
		}
	}
	if pl.concat != nil {
		// Beside its window, a concatenated slice holds the ids of the
		// row group its oldest document came in (its reader tokenized it
		// whole): at most 4 bytes per decoded byte.
		sz.window += n * 4 * maxRG
		// The next epoch's readers open once the current epoch's have
		// tokenized all they read (packconcat_stream.go openAhead): the
		// ids those hold, not yet handed out, beside the new ones'.
		sz.tokens *= 2
	}
	sz.overhead = n * sliceOverhead
	sz.reserve = sz.readAhead + sz.tokens + sz.window + sz.overhead + 2*sz.step
	return sz
}

// schemaRowBytes returns the bytes per row of records of schema: exact for
// fixed-width columns (a validity bitmap counted as a byte), varRow once for
// all the others together.
func schemaRowBytes(schema *arrow.Schema, varRow float64) float64 {
	var fixed float64
	variable := false
	for _, f := range schema.Fields() {
		b, ok := typeRowBytes(f.Type)
		if !ok {
			variable = true
			continue
		}
		fixed += b + 1
	}
	if variable {
		fixed += varRow
	}
	return fixed
}

// typeRowBytes returns the bytes of one value of t, and false when t is not
// fixed-width.
func typeRowBytes(t arrow.DataType) (float64, bool) {
	switch t := t.(type) {
	case *arrow.FixedSizeListType:
		e, ok := typeRowBytes(t.Elem())
		return float64(t.Len()) * e, ok
	case arrow.FixedWidthDataType:
		return max(float64(t.BitWidth())/8, 0.125), true
	}
	return 0, false
}

// checkStep refuses a plan whose step cannot fit the server's max message
// size (transport.ErrTooLarge, with the numbers and what to change). It
// runs before the read-ahead's plan (budget.go), which depends on the same
// sizes.
func (p *Pipeline) checkStep(pl *pipelinePlan) error {
	l := p.serverLimits()
	if l.MaxMessageSize <= 0 {
		return nil // not served: nothing to fit
	}
	sz := p.sizeOf(pl)
	n := len(pl.cfg.slices)
	if sz.step > float64(l.MaxMessageSize) {
		return fmt.Errorf("feed: %w: a step of this request holds about %.0f bytes (%d slices of %d rows at %.0f bytes per row), over the server's max message size of %d bytes (--max-message-size): "+
			"lower global_batch_size, the slices per request, or a list column's length",
			transport.ErrTooLarge, sz.step, n, sz.rows, sz.rowBytes, l.MaxMessageSize)
	}
	return nil
}

// checkMemory refuses a plan whose stream cannot fit the server's memory
// budget (transport.ErrTooLarge, with the numbers and what to change).
func (p *Pipeline) checkMemory(pl *pipelinePlan) error {
	l := p.serverLimits()
	if l.MemoryBudget <= 0 {
		return nil
	}
	sz := p.sizeOf(pl)
	n := len(pl.cfg.slices)
	if sz.reserve+sz.step > float64(l.MemoryBudget) {
		return fmt.Errorf("feed: %w: this request's stream needs about %.0f bytes of memory (read-ahead %.0f, token ids in flight %.0f, shuffle windows %.0f, %d slices x %d bytes of readers and cutters, "+
			"three steps of %.0f bytes: %d slices of %d rows at %.0f bytes per row), over the server's memory budget of %d bytes (--memory-budget): "+
			"ask for fewer slices per request, a smaller global_batch_size, shuffle window or list length, or raise the server's --memory-budget (a Loader's own server: meshfeed.ServerOptions(memory_budget=...)) or lower its --read-ahead",
			transport.ErrTooLarge, sz.reserve+sz.step, sz.readAhead, sz.tokens, sz.window, n, sliceOverhead, sz.step, n, sz.rows, sz.rowBytes, l.MemoryBudget)
	}
	return nil
}

// reserve takes the memory of pl's stream from the server's account,
// waiting until it fits or ctx ends; it returns the bytes taken, for
// unreserve.
func (p *Pipeline) reserve(ctx context.Context, pl *pipelinePlan) (int64, error) {
	if p.serverLimits().Memory == nil {
		return 0, nil
	}
	n := int64(math.Min(p.sizeOf(pl).reserve, math.MaxInt64/2))
	if err := p.reserveBytes(ctx, n, "this stream"); err != nil {
		return 0, err
	}
	return n, nil
}

// reserveBytes takes n bytes from the server's memory account for what
// (a stream, a filter's evaluation), dropping the filter columns held for
// streams (HeldChunks.Shed) when they do not fit now, then waiting until
// they fit, for at most
// the server's idle timeout (then transport.ErrTooManyStreams: retry later),
// or until ctx ends. n over the whole budget is transport.ErrTooLarge at
// once.
func (p *Pipeline) reserveBytes(ctx context.Context, n int64, what string) error {
	l := p.serverLimits()
	if l.Memory == nil || l.Memory.TryReserve(n) {
		return nil
	}
	// The filter columns plans kept for their streams yield first: those
	// streams read them from storage instead.
	p.cfg.held.Shed()
	wctx := ctx
	if l.IdleTimeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, l.IdleTimeout)
		defer cancel()
	}
	if err := l.Memory.Reserve(wctx, n); err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			// The server's memory stayed taken by other streams: like a
			// server at its stream limit, busy for now.
			return fmt.Errorf("feed: %w: %s needs %d bytes of the server's memory budget of %d bytes, and other streams held it for the idle timeout (%v): retry later",
				transport.ErrTooManyStreams, what, n, l.Memory.Limit(), l.IdleTimeout)
		}
		return fmt.Errorf("feed: waiting for %d bytes of the server's memory budget for %s: %w", n, what, err)
	}
	return nil
}
