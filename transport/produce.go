package transport

// One stream's work, whichever wire it goes out on: admitting it, its
// producer (the backend's steps, joined or not, held against the memory
// budget), and the Flight send loop.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/meshfeed/meshfeed/internal/arrowmem"
)

// admitStream takes one of the server's stream slots (ErrTooManyStreams when
// none is free) and counts the stream; leave gives the slot back.
func (s *Server) admitStream() (leave func(), err error) {
	select {
	case s.slots <- struct{}{}:
	default:
		return nil, fmt.Errorf("transport: %w: the server serves its limit of %d streams; retry later", ErrTooManyStreams, cap(s.slots))
	}
	s.metrics.streamsActive.Add(1)
	s.metrics.streamsTotal.Add(1)
	return func() {
		s.metrics.streamsActive.Add(-1)
		<-s.slots
	}, nil
}

// startProducer runs produce for st on its own goroutine. stop cancels it
// (through cancel, ctx's), drops the steps it queued, waits for it and closes
// st, returning Close's error.
func (s *Server) startProducer(ctx context.Context, cancel context.CancelFunc, st Stream, join bool) (<-chan item, func() error) {
	items := make(chan item, s.cfg.prefetch)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(items)
		s.produce(ctx, st, items, join)
	}()
	return items, func() error {
		cancel()
		for it := range items {
			s.drop(it)
		}
		wg.Wait()
		return st.Close()
	}
}

// item is one step handed from the producer to the send loop: its slices
// joined into rec (Flight), or its slices as they came (shared memory).
type item struct {
	rec    arrow.RecordBatch
	slices []arrow.RecordBatch
	meta   StepMeta
	size   int64
	err    error
}

// sent counts what one stream sent.
type sent struct{ steps, rows, bytes int64 }

// stream runs the producer and the send loop of one DoGet and closes st.
func (s *Server) stream(ctx context.Context, st Stream, fs flight.DataStreamWriter, idle *idleClock) (n sent, err error) {
	ctx, cancel := context.WithCancel(ctx)
	items, stop := s.startProducer(ctx, cancel, st, true)
	defer func() {
		if cerr := stop(); cerr != nil && err == nil {
			err = fmt.Errorf("transport: close stream: %w", cerr)
		}
	}()

	schema := st.Schema()
	if schema == nil {
		return n, errors.New("transport: backend stream has no schema")
	}
	send, closeWriter, err := s.stepWriter(fs, schema, idle)
	if err != nil {
		return n, err
	}
	defer closeWriter()

	for {
		var it item
		var ok bool
		waited := time.Now()
		if !idle.waitingNext() {
			return n, fmt.Errorf("transport: %w: the call gave up on the stream before step %d", ErrIdle, n.steps)
		}
		select {
		case <-ctx.Done():
			idle.gotNext()
			return n, ctx.Err()
		case it, ok = <-items:
		}
		idle.gotNext()
		if !ok {
			return n, errors.New("transport: producer stopped without a reason")
		}
		if it.err != nil {
			if errors.Is(it.err, io.EOF) {
				return n, nil
			}
			return n, fmt.Errorf("transport: step %d: %w", n.steps, it.err)
		}
		meta, err := json.Marshal(it.meta)
		if err != nil {
			s.drop(it)
			return n, fmt.Errorf("transport: encode step metadata: %w", err)
		}
		rows := it.rec.NumRows()
		sending := time.Now()
		s.metrics.waitSeconds.Observe(sending.Sub(waited).Seconds())
		if !idle.sending() {
			s.drop(it)
			return n, fmt.Errorf("transport: %w: the call gave up on the stream before step %d", ErrIdle, n.steps)
		}
		err = send(it, meta)
		idle.sent()
		if err != nil {
			return n, fmt.Errorf("transport: send epoch %d step %d: %w", it.meta.Epoch, it.meta.Step, err)
		}
		s.metrics.sendSeconds.Observe(time.Since(sending).Seconds())
		n.steps++
		n.rows += rows
		n.bytes += it.size
		s.metrics.steps.Add(1)
		s.metrics.rows.Add(rows)
		s.metrics.bytes.Add(it.size)
	}
}

// stepWriter sends the schema of a DoGet at once, before the first step is
// read (so a client sees the stream accepted and its schema without
// waiting), and returns how each step goes out: zero-copy when the stream
// allows it, else through the stock writer (zstd bodies, dictionaries, a
// writer that is not gRPC's). send releases the item (at once, or once gRPC
// has written its buffers); closeWriter ends the stock writer.
func (s *Server) stepWriter(fs flight.DataStreamWriter, schema *arrow.Schema, idle *idleClock) (send func(item, []byte) error, closeWriter func(), err error) {
	hw := flight.NewRecordWriter(fs, ipc.WithSchema(schema), ipc.WithAllocator(s.cfg.mem))
	if err := hw.Close(); err != nil {
		return nil, nil, fmt.Errorf("transport: send schema: %w", err)
	}
	if zw := newZeroCopyWriter(fs, schema, s.cfg.zstd, s.cfg.mem); zw != nil {
		// The record and its budget share are held until gRPC has written
		// (or dropped) its buffers; the idle clock counts it held till then.
		return func(it item, meta []byte) error {
			idle.handed()
			return zw.write(it.rec, meta, func() { s.drop(it); idle.written() })
		}, func() {}, nil
	}
	opts := []ipc.Option{ipc.WithSchema(schema), ipc.WithAllocator(s.cfg.mem)}
	if s.cfg.zstd {
		opts = append(opts, ipc.WithZstd())
	}
	// The record writer starts with the schema message, already sent: skip it.
	w := flight.NewRecordWriter(&skipFirst{w: fs, skip: 1}, opts...)
	send = func(it item, meta []byte) error {
		defer s.drop(it)
		// A step sent as its slices (multiRecord) is concatenated here.
		rec, err := flatRecord(it.rec)
		if err != nil {
			return err
		}
		return w.WriteWithAppMetadata(rec, meta)
	}
	return send, func() { w.Close() }, nil
}

// produce reads steps from st into items until an error (io.EOF included),
// which it hands over as the last item, or until ctx is done. With join,
// each step's slices are joined into one record (join.go); without, they are
// queued as they are (the shared-memory writer lays them out itself). Each
// queued step holds its size in the memory budget until it is dropped.
func (s *Server) produce(ctx context.Context, st Stream, items chan<- item, join bool) {
	schema := st.Schema()
	for n := 0; ; n++ {
		it, err := s.nextItem(ctx, st, schema, n, join)
		if err != nil {
			select {
			case items <- item{err: err}:
			case <-ctx.Done():
			}
			return
		}
		if err := s.budget.acquire(ctx, it.size); err != nil {
			it.release()
			return
		}
		s.metrics.queued.Add(1)
		select {
		case items <- it:
		case <-ctx.Done():
			s.drop(it)
			return
		}
	}
}

// nextItem returns the n-th step of st (counted from the stream's start) as
// an item: its slices joined into one record, or (join false) as they are.
// A panic in the backend's Next becomes an error naming the step.
func (s *Server) nextItem(ctx context.Context, st Stream, schema *arrow.Schema, n int, join bool) (it item, err error) {
	var step Step
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("transport: backend panicked producing message %d of the stream (steps counted from its first, 0-based): %v", n, r)
			}
		}()
		step, err = st.Next(ctx)
	}()
	if err != nil {
		step.Release()
		return item{}, err
	}
	if len(step.Slices) == 0 || slices.Contains(step.Slices, nil) {
		step.Release()
		return item{}, fmt.Errorf("backend returned step %d (epoch %d step %d) without records", n, step.Meta.Epoch, step.Meta.Step)
	}
	if !join {
		return item{slices: step.Slices, meta: step.Meta, size: slicesBytes(step.Slices)}, nil
	}
	rec, err := joinSlices(schema, step.Slices, s.cfg.mem)
	if err != nil {
		return item{}, fmt.Errorf("transport: epoch %d step %d: join slices: %w", step.Meta.Epoch, step.Meta.Step, err)
	}
	return item{rec: rec, meta: step.Meta, size: recordBytes(rec)}, nil
}

// rows returns the item's rows.
func (it item) rows() int64 {
	if it.rec != nil {
		return it.rec.NumRows()
	}
	return Step{Slices: it.slices}.Rows()
}

// release releases the item's records.
func (it item) release() {
	if it.rec != nil {
		it.rec.Release()
	}
	Step{Slices: it.slices}.Release()
}

// drop releases an item's record and its share of the budget, and takes it
// off the queue-depth gauge.
func (s *Server) drop(it item) {
	if it.rec != nil || it.slices != nil {
		it.release()
		s.unqueue(it)
	}
}

// unqueue returns an item's share of the budget and takes it off the
// queue-depth gauge, keeping its records (the shared-memory wire holds them
// until the client releases the step).
func (s *Server) unqueue(it item) {
	s.budget.release(it.size)
	s.metrics.queued.Add(-1)
}

// skipFirst drops the first skip messages written to it.
type skipFirst struct {
	w    flight.DataStreamWriter
	skip int
}

func (s *skipFirst) Send(fd *flight.FlightData) error {
	if s.skip > 0 {
		s.skip--
		return nil
	}
	return s.w.Send(fd)
}

// recordBytes returns the bytes of the buffers of rec's columns (children and
// dictionaries included): what a queued record holds in memory. A
// multiRecord is counted by what its concatenation holds, without building
// it (arrowmem.RecordBytes would concatenate it to see its columns).
func recordBytes(rec arrow.RecordBatch) int64 {
	if m, ok := rec.(*multiRecord); ok {
		return m.size
	}
	return arrowmem.RecordBytes(rec)
}
