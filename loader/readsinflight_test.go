package loader_test

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
)

// concurrencyStore is a LocalStore whose ReadAt calls wait, each, until
// want of them are in flight together (or a second has passed), recording
// the most it saw: how many reads a reader keeps in flight.
type concurrencyStore struct {
	*objstore.LocalStore
	want int

	mu      sync.Mutex
	cur     int
	peak    int
	reached chan struct{}
}

func (s *concurrencyStore) ReadAt(ctx context.Context, obj objstore.Object, p []byte, off int64) error {
	s.mu.Lock()
	s.cur++
	s.peak = max(s.peak, s.cur)
	if s.cur >= s.want {
		select {
		case <-s.reached:
		default:
			close(s.reached)
		}
	}
	s.mu.Unlock()
	select {
	case <-s.reached:
	case <-time.After(time.Second):
	}
	err := s.LocalStore.ReadAt(ctx, obj, p, off)
	s.mu.Lock()
	s.cur--
	s.mu.Unlock()
	return err
}

// TestReadsInFlight: a reader with one decode worker keeps
// WithReaderReadsInFlight row groups fetching at once (it had one), and its
// records come out in order and whole.
func TestReadsInFlight(t *testing.T) {
	dir := t.TempDir()
	spec := datagen.Spec{Rows: 4000, Files: 2, RowGroupRows: 100, Features: 4, Format: datagen.FormatParquet}
	if _, err := datagen.Write(context.Background(), datagen.LocalCreator{}, dir, spec); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		reads, want int
	}{{1, 1}, {8, 8}, {32, 32}} {
		store := &concurrencyStore{LocalStore: objstore.NewLocalStore(), want: c.want, reached: make(chan struct{})}
		ds, err := loader.Open(context.Background(), store, []string{filepath.Join(dir, "*.parquet")},
			loader.WithMmap(false), loader.WithDecodeWorkers(1), loader.WithFooterCache(nil))
		if err != nil {
			t.Fatal(err)
		}
		store.mu.Lock()
		store.peak = 0 // footers are read 16 at a time: count the row groups only
		store.mu.Unlock()
		r := ds.NewReader(context.Background(), ds.RowGroups(), memory.DefaultAllocator, loader.WithReaderReadsInFlight(c.reads))
		var rows int64
		for {
			rec, _, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			rows += rec.NumRows()
			rec.Release()
		}
		r.Close()
		if rows != spec.Rows {
			t.Errorf("reads in flight %d: %d rows read, want %d", c.reads, rows, spec.Rows)
		}
		store.mu.Lock()
		peak := store.peak
		store.mu.Unlock()
		if peak != c.want {
			t.Errorf("WithReaderReadsInFlight(%d), one decode worker: at most %d reads in flight, want %d", c.reads, peak, c.want)
		}
	}
}
