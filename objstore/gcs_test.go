package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/objstore/objstoretest"
)

// faultSetup starts a fake GCS with one object of size bytes and a store that
// reaches it through a objstoretest.FaultFront.
func faultSetup(t *testing.T, size int, opts ...objstore.GCSOption) (*objstoretest.FaultFront, *objstore.GCSStore, objstore.Object, []byte) {
	t.Helper()
	fake := objstoretest.NewFakeGCS(t, "faults")
	direct := fake.Store(t)
	data := randBytes(newRand(t), size)
	obj := objstoretest.PutObject(t, direct, "gs://faults/obj.bin", data)
	proxy := objstoretest.NewFaultFront(t, fake.URL)
	store := objstoretest.NewStore(t, proxy.URL(), opts...)
	return proxy, store, obj, data
}

// fast retry settings for tests: small waits, a 2 s budget.
func fastRetry(attempts int) []objstore.GCSOption {
	return []objstore.GCSOption{
		objstore.WithRetryBudget(attempts, 2*time.Second),
		objstore.WithRetryBackoff(5*time.Millisecond, 50*time.Millisecond),
		objstore.WithStallTimeout(300 * time.Millisecond),
	}
}

func checkRead(t *testing.T, store objstore.Store, obj objstore.Object, data []byte, off, n int64) {
	t.Helper()
	p := make([]byte, n)
	if err := store.ReadAt(context.Background(), obj, p, off); err != nil {
		t.Fatalf("ReadAt(%s, [%d, %d)) = %v", obj.URI, off, off+n, err)
	}
	if !bytes.Equal(p, data[off:off+n]) {
		t.Fatalf("ReadAt(%s, [%d, %d)) returned the wrong bytes", obj.URI, off, off+n)
	}
}

func TestGCSRetriesTransientStatus(t *testing.T) {
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusTooManyRequests, http.StatusInternalServerError} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			proxy, store, obj, data := faultSetup(t, 50_000, fastRetry(5)...)
			proxy.Arm(objstoretest.FaultStatus, status, 0, 3)
			checkRead(t, store, obj, data, 1000, 40_000)
			n, _ := proxy.Seen()
			st := store.Stats()
			if n != 4 || st.Retries.Load() != 3 || st.Resumes.Load() != 0 {
				t.Errorf("after 3 × %d: %d requests, %d retries, %d resumes; want 4, 3, 0", status, n, st.Retries.Load(), st.Resumes.Load())
			}
		})
	}
}

func TestGCSResumesBrokenBody(t *testing.T) {
	const off, n, cut = 5000, 200_000, 1000
	proxy, store, obj, data := faultSetup(t, 300_000, fastRetry(5)...)
	proxy.Arm(objstoretest.FaultCut, 0, cut, 3)
	checkRead(t, store, obj, data, off, n)
	reqs, ranges := proxy.Seen()
	// Each cut delivers exactly cut bytes, so attempt i starts at off+i*cut.
	var want []string
	for i := range 4 {
		want = append(want, fmt.Sprintf("bytes=%d-%d", off+i*cut, off+n-1))
	}
	if reqs != 4 || !slices.Equal(ranges, want) {
		t.Errorf("ranges requested = %q, want %q", ranges, want)
	}
	if st := store.Stats(); st.Retries.Load() != 3 || st.Resumes.Load() != 3 {
		t.Errorf("retries %d, resumes %d; want 3, 3", st.Retries.Load(), st.Resumes.Load())
	}
}

func TestGCSStallRecovers(t *testing.T) {
	const off, n, stallAt = 100, 60_000, 500
	proxy, store, obj, data := faultSetup(t, 100_000, fastRetry(5)...)
	proxy.Arm(objstoretest.FaultStall, 0, stallAt, 1)
	start := time.Now()
	checkRead(t, store, obj, data, off, n)
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Errorf("read took %v, shorter than the 300ms stall timeout: the stall was not injected", el)
	}
	_, ranges := proxy.Seen()
	want := []string{fmt.Sprintf("bytes=%d-%d", off, off+n-1), fmt.Sprintf("bytes=%d-%d", off+stallAt, off+n-1)}
	if !slices.Equal(ranges, want) {
		t.Errorf("ranges requested = %q, want %q", ranges, want)
	}
	if st := store.Stats(); st.Retries.Load() != 1 || st.Resumes.Load() != 1 {
		t.Errorf("retries %d, resumes %d; want 1, 1", st.Retries.Load(), st.Resumes.Load())
	}
}

// TestGCSGivesUp checks that permanent failures of every kind end with
// ErrUnavailable naming the object, within the budget, after a bounded number
// of requests.
func TestGCSGivesUp(t *testing.T) {
	const attempts = 4
	cases := []struct {
		name   string
		inject func(p *objstoretest.FaultFront)
		opts   []objstore.GCSOption
		max    time.Duration // upper bound on the time to fail
	}{
		{"503", func(p *objstoretest.FaultFront) { p.Arm(objstoretest.FaultStatus, 503, 0, -1) }, fastRetry(attempts), 2 * time.Second},
		{"KillAtByte0", func(p *objstoretest.FaultFront) { p.Arm(objstoretest.FaultCut, 0, 0, -1) }, fastRetry(attempts), 2 * time.Second},
		{"StallAtByte0", func(p *objstoretest.FaultFront) { p.Arm(objstoretest.FaultStall, 0, 0, -1) }, fastRetry(attempts), 2*time.Second + 300*time.Millisecond},
		// Only the time budget can stop this one: many attempts allowed, 1 s.
		{"503TimeBudget", func(p *objstoretest.FaultFront) { p.Arm(objstoretest.FaultStatus, 503, 0, -1) }, []objstore.GCSOption{
			objstore.WithRetryBudget(1000, time.Second),
			objstore.WithRetryBackoff(20*time.Millisecond, 20*time.Millisecond),
		}, time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			proxy, store, obj, _ := faultSetup(t, 10_000, c.opts...)
			c.inject(proxy)
			start := time.Now()
			err := store.ReadAt(context.Background(), obj, make([]byte, 5000), 100)
			el := time.Since(start)
			reqs, _ := proxy.Seen()
			t.Logf("%v after %v, %d requests", err, el, reqs)
			if !errors.Is(err, objstore.ErrUnavailable) || !strings.Contains(err.Error(), obj.URI) {
				t.Errorf("ReadAt = %v, want ErrUnavailable naming %s", err, obj.URI)
			}
			if el > c.max+500*time.Millisecond {
				t.Errorf("gave up after %v, budget %v", el, c.max)
			}
			if c.name != "503TimeBudget" && reqs != attempts {
				t.Errorf("%d requests, want %d (the attempt budget)", reqs, attempts)
			}
			// Waits are jittered in [10ms, 20ms]: 50 to 100 requests fit in 1s.
			if c.name == "503TimeBudget" && (reqs < 35 || reqs > 101) {
				t.Errorf("%d requests in 1s at 10-20ms backoff, want 50-100", reqs)
			}
		})
	}
}

func TestGCSPermanentErrorsNotRetried(t *testing.T) {
	proxy, store, obj, _ := faultSetup(t, 1000, fastRetry(5)...)
	proxy.Arm(objstoretest.FaultStatus, http.StatusForbidden, 0, 1)
	err := store.ReadAt(context.Background(), obj, make([]byte, 10), 0)
	if !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), obj.URI) {
		t.Errorf("ReadAt with 403 = %v, want fs.ErrPermission naming %s", err, obj.URI)
	}
	if n, _ := proxy.Seen(); n != 1 {
		t.Errorf("403: %d requests, want 1", n)
	}

	missing := objstore.Object{URI: "gs://faults/missing.bin"}
	err = store.ReadAt(context.Background(), missing, make([]byte, 10), 0)
	if !errors.Is(err, objstore.ErrNotFound) || !strings.Contains(err.Error(), missing.URI) {
		t.Errorf("ReadAt(missing) = %v, want ErrNotFound naming %s", err, missing.URI)
	}
	if n, _ := proxy.Seen(); n != 1 {
		t.Errorf("404: %d requests, want 1", n)
	}
	if r := store.Stats().Retries.Load(); r != 0 {
		t.Errorf("retries = %d, want 0", r)
	}
}

// TestGCSContextCancel checks that a stalled read returns when the caller's
// context ends, well before a long stall timeout.
func TestGCSContextCancel(t *testing.T) {
	proxy, store, obj, _ := faultSetup(t, 1000, objstore.WithStallTimeout(time.Minute))
	proxy.Arm(objstoretest.FaultStall, 0, 0, -1)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := store.ReadAt(ctx, obj, make([]byte, 10), 0)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("ReadAt with a 300ms context = %v after %v, want DeadlineExceeded soon", err, time.Since(start))
	}
}

// BenchmarkGCSRangedRead compares the raw client (NewRangeReader + ReadFull)
// with GCSStore.ReadAt on the same in-process emulator and client, so the
// store's overhead (tracking transport, watchdog, retry loop) shows.
func BenchmarkGCSRangedRead(b *testing.B) {
	const objSize = 32 << 20
	store := objstoretest.StartFakeGCS(b, "bench")
	data := make([]byte, objSize)
	for i := range data {
		data[i] = byte(i * 7)
	}
	obj := objstoretest.PutObject(b, store, "gs://bench/obj.bin", data)
	ctx := context.Background()
	handle := store.Client().Bucket("bench").Object("obj.bin")
	for _, size := range []int{1 << 20, 8 << 20} {
		p := make([]byte, size)
		offset := func(i int) int64 { return int64(i*size/3) % int64(objSize-size) }
		b.Run(fmt.Sprintf("raw/%dMiB", size>>20), func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				r, err := handle.NewRangeReader(ctx, offset(i), int64(size))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(r, p); err != nil {
					b.Fatal(err)
				}
				r.Close()
			}
		})
		b.Run(fmt.Sprintf("store/%dMiB", size>>20), func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if err := store.ReadAt(ctx, obj, p, offset(i)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
