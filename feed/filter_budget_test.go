package feed

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

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
