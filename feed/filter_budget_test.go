package feed

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/transport"
)

// accountWatch is a store (reads, no mappings) that records the server
// memory account's bytes in use at each read.
type accountWatch struct {
	objstore.Store
	mu    sync.Mutex
	acct  *transport.MemoryAccount
	reads []int64 // InUse at each read, in order
}

func (s *accountWatch) ReadAt(ctx context.Context, obj objstore.Object, p []byte, off int64) error {
	s.mu.Lock()
	if s.acct != nil {
		s.reads = append(s.reads, s.acct.InUse())
	}
	s.mu.Unlock()
	return s.Store.ReadAt(ctx, obj, p, off)
}

// filterBudgetPipeline is a Pipeline over an accountWatch store with the
// limits of a server of the given memory budget and idle timeout.
func filterBudgetPipeline(t *testing.T, dir string, budget int64) (*Pipeline, *accountWatch, *transport.MemoryAccount) {
	t.Helper()
	store := &accountWatch{Store: objstore.NewLocalStore()}
	p, err := NewPipeline(context.Background(), WithStore(store), WithCacheTTL(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	srv, err := transport.New(p, transport.WithAllowedRoots(dir), transport.WithMemoryBudget(budget), transport.WithIdleTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	acct := srv.Limits().Memory
	store.mu.Lock()
	store.acct = acct
	store.mu.Unlock()
	return p, store, acct
}

// TestFilterPlanInMemoryAccount: the filter columns a plan decodes are
// read under a reservation in the server's memory account (--memory-budget),
// returned when the plan is made; where the account is held by others the
// plan waits for at most the idle timeout, then fails as a busy server does
// (ResourceExhausted, retry later) naming the file; a budget below what one
// row group's evaluation holds is refused at once.
func TestFilterPlanInMemoryAccount(t *testing.T) {
	dir := writeDataset(t, filterSpec())
	req := filterRequest(dir, `[["label", "<", 100]]`, 2) // scattered: every row group evaluated
	ctx := context.Background()

	p, store, acct := filterBudgetPipeline(t, dir, 64<<20)
	if _, err := p.Info(ctx, req); err != nil {
		t.Fatal(err)
	}
	if ev := p.FilterStats().Evaluated.Load(); ev == 0 {
		t.Fatal("no row group evaluated: the test does not read filter columns")
	}
	store.mu.Lock()
	var during int64
	for _, n := range store.reads {
		during = max(during, n)
	}
	store.mu.Unlock()
	if during <= 0 {
		t.Errorf("the filter columns were read with %d bytes of the memory account in use, want the plan's reservation", during)
	}
	if n := acct.InUse(); n != 0 {
		t.Errorf("after the plan the account holds %d bytes, want 0", n)
	}

	// The account held by another stream: the plan waits, then fails.
	p2, _, acct2 := filterBudgetPipeline(t, dir, 64<<20)
	if !acct2.TryReserve(64 << 20) {
		t.Fatal("TryReserve(the whole budget) = false")
	}
	start := time.Now()
	_, err := p2.Info(ctx, req)
	if !errors.Is(err, transport.ErrTooManyStreams) || !strings.Contains(err.Error(), "filters") || !strings.Contains(err.Error(), dir) {
		t.Errorf("Info with the account held = %v, want ErrTooManyStreams naming the filters and the file", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("refused after %v, want a wait of about the idle timeout (300ms)", d)
	}
	acct2.Unreserve(64 << 20)
	if _, err := p2.Info(ctx, req); err != nil {
		t.Errorf("Info once the account is free = %v", err)
	}

	// A budget below one row group's evaluation.
	p3, _, _ := filterBudgetPipeline(t, dir, 4<<10)
	_, err = p3.Info(ctx, req)
	if !errors.Is(err, transport.ErrTooLarge) || !strings.Contains(err.Error(), dir) {
		t.Errorf("Info with a 4 KiB budget = %v, want ErrTooLarge naming the file", err)
	}
}

// withoutEdgeShare makes every slice fetch its own pages.
func withoutEdgeShare() Option { return func(c *pipelineConfig) { c.noEdgeShare = true } }

// TestFilterEdgePagesFetchedOnce: with a filter on the sorted column whose
// kept range, split into 4 slices served by one stream, puts the slices'
// edges inside row groups, the slices that read pieces of the same row
// group fetch the pages they share once (loader.FetchShare): at least a
// page per inner edge fewer than when each fetches its own, and the same
// rows delivered. The pages are read (loader.WithMmap(false)), as from a
// remote store: mapped, each slice's pieces are parts of its own mapping of
// the row group, and the page cache serves the pages two slices share.
func TestFilterEdgePagesFetchedOnce(t *testing.T) {
	spec := filterSpec()
	spec.PageIndex = true
	dir := writeDataset(t, spec)
	const filters = `[["id", ">=", 1500], ["id", "<", 7700]]`
	run := func(opts ...Option) (int64, [][]int64) {
		store := objstore.NewLocalStore()
		defer store.Close()
		p, err := NewPipeline(context.Background(), append([]Option{WithStore(store), WithCacheTTL(0), WithLoaderOptions(loader.WithMmap(false))}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		slices, _ := streamIDs(t, p, filterRequest(dir, filters, 4))
		st := store.Stats()
		return st.BytesRead.Load() + st.BytesMapped.Load(), slices
	}
	run() // the footers into the process's cache, for both runs alike
	shared, ids := run()
	own, want := run(withoutEdgeShare())
	n := 0
	for i := range ids {
		n += len(ids[i])
		if !slices.Equal(ids[i], want[i]) {
			t.Errorf("slice %d: %d rows with the edge pages shared, %d without: want the same", i, len(ids[i]), len(want[i]))
		}
	}
	if n != 6200 {
		t.Errorf("%d rows delivered, want 6200", n)
	}
	t.Logf("bytes read at D=4: %d with the edge pages shared, %d without", shared, own)
	if page := int64(spec.PageBytes); shared > own-3*page {
		t.Errorf("read %d bytes with the edge pages shared, %d without: want at least 3 pages of %d fewer (one per inner edge)", shared, own, page)
	}
}
