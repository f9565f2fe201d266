package loader

import (
	"context"

	"io"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// RowGroupReader reads a sequence of row groups in order, fetching and
// decoding the next ones while the caller works on the current one, under an
// in-flight byte budget (WithReadAhead) and a decode concurrency
// (WithDecodeWorkers).
//
// # Caveats
//
// Records returned by Next belong to the caller, who must Release them.
// Close must be called (also after an error or io.EOF); it cancels work in
// flight and releases every record not handed out.
type RowGroupReader struct {
	budget  int64 // in-flight bytes
	workers int   // concurrent decodes
	ds      *Dataset
	ctx     context.Context
	cancel  context.CancelFunc
	queue   chan *pending
	wg      sync.WaitGroup
	stats   ReadStats

	mu       sync.Mutex
	inflight int64
	peak     int64
	freed    chan struct{} // signalled when budget is returned
	closed   bool
}

type pending struct {
	ref  RowGroupRef
	cost int64
	done chan struct{}
	rec  arrow.RecordBatch
	err  error
}

// ReaderOption configures one RowGroupReader, overriding the Dataset's
// settings for it.
type ReaderOption func(*RowGroupReader)

// WithReaderReadAhead sets this reader's in-flight byte budget (see
// WithReadAhead), for example a stream's budget split among its slices.
// Negative values are taken as 0.
func WithReaderReadAhead(bytes int64) ReaderOption {
	return func(r *RowGroupReader) { r.budget = max(bytes, 0) }
}

// WithReaderDecodeWorkers sets how many row groups this reader decodes at
// once (see WithDecodeWorkers); values below 1 are taken as 1.
func WithReaderDecodeWorkers(n int) ReaderOption {
	return func(r *RowGroupReader) { r.workers = max(n, 1) }
}

// NewReader starts reading refs in order (typically a plan's read set for one
// stream). Reading starts at once in the background.
func (ds *Dataset) NewReader(ctx context.Context, refs []RowGroupRef, mem memory.Allocator, opts ...ReaderOption) *RowGroupReader {
	ctx, cancel := context.WithCancel(ctx)
	r := &RowGroupReader{
		budget:  ds.cfg.readAheadBytes,
		workers: ds.cfg.decodeWorkers,
		ds:      ds,
		ctx:     ctx,
		cancel:  cancel,
		queue:   make(chan *pending, 64),
		freed:   make(chan struct{}, 1),
	}
	for _, o := range opts {
		o(r)
	}
	r.wg.Add(1)
	go r.produce(append([]RowGroupRef(nil), refs...), mem)
	return r
}

// PeakInFlight is the most bytes (compressed plus estimated decoded) that
// were in flight at once: at most the read-ahead budget, or one row group
// when a single row group is larger.
func (r *RowGroupReader) PeakInFlight() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.peak
}

// Stats reports what this reader has fetched and decoded so far.
func (r *RowGroupReader) Stats() *ReadStats { return &r.stats }

func (r *RowGroupReader) cost(ref RowGroupRef) int64 {
	rg := r.ds.Files[ref.File].RowGroups[ref.Index]
	return rg.Bytes + rg.DecodedBytes
}

// acquire waits until cost fits the budget (one row group always fits when
// nothing else is in flight).
func (r *RowGroupReader) acquire(cost int64) error {
	for {
		r.mu.Lock()
		if r.inflight == 0 || r.inflight+cost <= r.budget {
			r.inflight += cost
			r.peak = max(r.peak, r.inflight)
			r.mu.Unlock()
			return nil
		}
		r.mu.Unlock()
		select {
		case <-r.freed:
		case <-r.ctx.Done():
			return r.ctx.Err()
		}
	}
}

func (r *RowGroupReader) release(cost int64) {
	r.mu.Lock()
	r.inflight -= cost
	r.mu.Unlock()
	select {
	case r.freed <- struct{}{}:
	default:
	}
}

func (r *RowGroupReader) produce(refs []RowGroupRef, mem memory.Allocator) {
	defer r.wg.Done()
	defer close(r.queue)
	workers := make(chan struct{}, r.workers)
	for _, ref := range refs {
		p := &pending{ref: ref, cost: r.cost(ref), done: make(chan struct{})}
		if err := r.acquire(p.cost); err != nil {
			return
		}
		select {
		case workers <- struct{}{}:
		case <-r.ctx.Done():
			r.release(p.cost)
			return
		}
		select {
		case r.queue <- p:
		case <-r.ctx.Done():
			<-workers
			r.release(p.cost)
			return
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer func() { <-workers }()
			p.rec, p.err = r.ds.readRowGroup(r.ctx, ref.File, ref.Index, mem, &r.stats)
			close(p.done)
		}()
	}
}

// Next returns the next row group's record in order, io.EOF after the last,
// or the first error (which names the file and row group).
func (r *RowGroupReader) Next() (arrow.RecordBatch, RowGroupRef, error) {
	var p *pending
	var ok bool
	select {
	case p, ok = <-r.queue:
	case <-r.ctx.Done():
		return nil, RowGroupRef{}, r.ctx.Err()
	}
	if !ok {
		if err := r.ctx.Err(); err != nil {
			return nil, RowGroupRef{}, err
		}
		return nil, RowGroupRef{}, io.EOF
	}
	select {
	case <-p.done:
	case <-r.ctx.Done():
		<-p.done
		if p.rec != nil {
			p.rec.Release()
		}
		r.release(p.cost)
		return nil, p.ref, r.ctx.Err()
	}
	r.release(p.cost)
	if p.err != nil {
		r.cancel()
		return nil, p.ref, p.err
	}
	return p.rec, p.ref, nil
}

// Close cancels reading and releases every record not handed out. It waits
// for background work to stop.
func (r *RowGroupReader) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	for p := range r.queue {
		<-p.done
		if p.rec != nil {
			p.rec.Release()
		}
	}
	r.wg.Wait()
	return nil
}
