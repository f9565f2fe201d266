package objstore_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"

	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/objstore/objstoretest"
)

// TestMain stops the package's shared Azurite (objstoretest.SharedAzurite).
func TestMain(m *testing.M) {
	code := m.Run()
	objstoretest.StopSharedAzurite()
	os.Exit(code)
}

// TestAzureConformance runs the store contract on Azurite, for each URI
// spelling: az://, abfs://, and abfs:// naming the account in its host.
func TestAzureConformance(t *testing.T) {
	az := objstoretest.SharedAzurite(t)
	for _, spell := range []struct{ name, root string }{
		{"az", "az://%s/suite"},
		{"abfs", "abfs://%s/suite"},
		{"abfs_account_host", "abfs://%s@" + objstoretest.AzuriteAccount + ".dfs.core.windows.net/suite"},
	} {
		t.Run(spell.name, func(t *testing.T) {
			objstoretest.Conformance(t, func(t *testing.T) (objstore.Store, string) {
				c := az.Container(t)
				return az.Store(t), fmt.Sprintf(spell.root, c)
			}, nil)
		})
	}
}

// azFaultSetup puts one object of size bytes into a new container of the
// shared Azurite and returns a FaultFront in front of Azurite (faulting
// ranged GETs: how the SDK downloads), a store reaching Azurite through it,
// the object as listed, and its bytes. The SDK sends its ranges as
// x-ms-range (IsAzureRangedGet), not Range.
func azFaultSetup(t *testing.T, size int, opts ...objstore.AzureOption) (*objstoretest.FaultFront, *objstore.AzureStore, objstore.Object, []byte) {
	t.Helper()
	az := objstoretest.SharedAzurite(t)
	c := az.Container(t)
	data := randBytes(newRand(t), size)
	obj := objstoretest.PutObject(t, az.Store(t), "az://"+c+"/obj.bin", data)
	proxy := objstoretest.NewFaultFrontFor(t, az.Base, objstoretest.IsAzureRangedGet)
	store := objstoretest.NewAzureStoreAt(t, proxy.URL()+"/"+objstoretest.AzuriteAccount, opts...)
	return proxy, store, obj, data
}

// azFastRetry: small waits, a 2 s budget, a 300 ms stall timeout.
func azFastRetry(attempts int) []objstore.AzureOption {
	return []objstore.AzureOption{
		objstore.WithAzureRetryBudget(attempts, 2*time.Second),
		objstore.WithAzureRetryBackoff(5*time.Millisecond, 50*time.Millisecond),
		objstore.WithAzureStallTimeout(300 * time.Millisecond),
	}
}

// TestAzureRetriesTransientStatus: 5xx bursts and throttling (503
// ServerBusy, 429) are retried with backoff and the read completes.
func TestAzureRetriesTransientStatus(t *testing.T) {
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			proxy, store, obj, data := azFaultSetup(t, 50_000, azFastRetry(5)...)
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

// TestAzureResumesBrokenBody: a body cut cleanly (truncated) or reset
// mid-way resumes at the first missing byte, pinned to the same ETag.
func TestAzureResumesBrokenBody(t *testing.T) {
	for _, kind := range []objstoretest.FaultKind{objstoretest.FaultCut, objstoretest.FaultReset} {
		t.Run(kind.String(), func(t *testing.T) {
			const off, n, cut = 5000, 200_000, 1000
			proxy, store, obj, data := azFaultSetup(t, 300_000, azFastRetry(5)...)
			proxy.Arm(kind, 0, cut, 3)
			checkRead(t, store, obj, data, off, n)
			reqs, ranges := proxy.Seen()
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
		})
	}
}

func TestAzureStallRecovers(t *testing.T) {
	const off, n, stallAt = 100, 60_000, 500
	proxy, store, obj, data := azFaultSetup(t, 100_000, azFastRetry(5)...)
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

// TestAzureGivesUp: a permanent outage, a connection that dies at byte 0 on
// every attempt and a permanent stall end with ErrUnavailable naming the
// object, after the attempt budget.
func TestAzureGivesUp(t *testing.T) {
	const attempts = 4
	for _, c := range []struct {
		name string
		kind objstoretest.FaultKind
		code int
	}{
		{"503", objstoretest.FaultStatus, 503},
		{"ResetAtByte0", objstoretest.FaultReset, 0},
		{"StallAtByte0", objstoretest.FaultStall, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			proxy, store, obj, _ := azFaultSetup(t, 10_000, azFastRetry(attempts)...)
			proxy.Arm(c.kind, c.code, 0, -1)
			start := time.Now()
			err := store.ReadAt(context.Background(), obj, make([]byte, 5000), 100)
			reqs, _ := proxy.Seen()
			t.Logf("%v after %v, %d requests", err, time.Since(start), reqs)
			if !errors.Is(err, objstore.ErrUnavailable) || !strings.Contains(err.Error(), obj.URI) {
				t.Errorf("ReadAt = %v, want ErrUnavailable naming %s", err, obj.URI)
			}
			if reqs != attempts {
				t.Errorf("%d requests, want %d (the attempt budget)", reqs, attempts)
			}
			if el := time.Since(start); el > 3*time.Second {
				t.Errorf("gave up after %v, budget 2s", el)
			}
		})
	}
}

// TestAzurePermanentErrors: wrong credentials (Azurite's 403
// AuthorizationFailure on a bad signature), an injected 403 and a missing
// object or container are typed, name the object and are not retried.
func TestAzurePermanentErrors(t *testing.T) {
	ctx := context.Background()
	proxy, store, obj, _ := azFaultSetup(t, 1000, azFastRetry(5)...)
	proxy.Arm(objstoretest.FaultStatus, http.StatusForbidden, 0, 1)
	err := store.ReadAt(ctx, obj, make([]byte, 10), 0)
	if !errors.Is(err, objstore.ErrPermission) || !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), obj.URI) {
		t.Errorf("ReadAt with 403 = %v, want ErrPermission naming %s", err, obj.URI)
	}
	if n, _ := proxy.Seen(); n != 1 {
		t.Errorf("403: %d requests, want 1", n)
	}

	wrongKey := base64.StdEncoding.EncodeToString([]byte("not the key of devstoreaccount1!"))
	bad := objstoretest.NewAzureStoreAt(t, proxy.URL()+"/"+objstoretest.AzuriteAccount,
		append(azFastRetry(5), objstore.WithAzureSharedKey(objstoretest.AzuriteAccount, wrongKey))...)
	err = bad.ReadAt(ctx, obj, make([]byte, 10), 0)
	if !errors.Is(err, objstore.ErrPermission) || !strings.Contains(err.Error(), obj.URI) || !strings.Contains(err.Error(), "403") {
		t.Errorf("ReadAt with a wrong key = %v, want ErrPermission (403) naming %s", err, obj.URI)
	}
	if n, _ := proxy.Seen(); n != 1 {
		t.Errorf("wrong key: %d requests, want 1", n)
	}
	if _, err := bad.Stat(ctx, obj.URI); !errors.Is(err, objstore.ErrPermission) {
		t.Errorf("Stat with a wrong key = %v, want ErrPermission", err)
	}
	if _, err := bad.List(ctx, obj.URI); !errors.Is(err, objstore.ErrPermission) {
		t.Errorf("List with a wrong key = %v, want ErrPermission", err)
	}

	u, _ := objstore.ParseAzureURI(obj.URI)
	for _, missing := range []string{"az://" + u.Container + "/missing.bin", "az://no-such-container/x.bin"} {
		err = store.ReadAt(ctx, objstore.Object{URI: missing}, make([]byte, 10), 0)
		if !errors.Is(err, objstore.ErrNotFound) || !strings.Contains(err.Error(), missing) {
			t.Errorf("ReadAt(%s) = %v, want ErrNotFound naming it", missing, err)
		}
		if _, err := store.Stat(ctx, missing); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("Stat(%s) = %v, want ErrNotFound", missing, err)
		}
	}
	if n, _ := proxy.Seen(); n != 2 {
		t.Errorf("404s: %d requests, want 2", n)
	}
	if r := store.Stats().Retries.Load() + bad.Stats().Retries.Load(); r != 0 {
		t.Errorf("retries = %d, want 0", r)
	}
}

// TestAzureReplacedMidEpoch: an object overwritten after it was listed is an
// error naming it and both ETags, also when the overwrite comes between two
// attempts of one read (a bare Object pins the first response's ETag).
func TestAzureReplacedMidEpoch(t *testing.T) {
	ctx := context.Background()
	az := objstoretest.SharedAzurite(t)
	proxy, store, obj, data := azFaultSetup(t, 100_000, azFastRetry(5)...)
	direct := az.Store(t)
	objstoretest.PutObject(t, direct, obj.URI, data[:50_000])
	err := store.ReadAt(ctx, obj, make([]byte, 10), 0)
	if !errors.Is(err, objstore.ErrNotFound) || !strings.Contains(err.Error(), obj.URI) || !strings.Contains(err.Error(), "replaced") {
		t.Errorf("ReadAt(listed version after overwrite) = %v, want ErrNotFound naming the object and saying it was replaced", err)
	}

	// A bare Object: the first attempt stalls after 1000 bytes, the object
	// is replaced meanwhile, and the resume after the stall timeout finds
	// another version.
	proxy.Arm(objstoretest.FaultStall, 0, 1000, 1)
	replaced := make(chan struct{})
	go func() {
		defer close(replaced)
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if _, injected := proxy.Counts(); injected > 0 {
				objstoretest.PutObject(t, direct, obj.URI, data[:60_000])
				return
			}
		}
	}()
	slow := objstoretest.NewAzureStoreAt(t, proxy.URL()+"/"+objstoretest.AzuriteAccount,
		objstore.WithAzureRetryBudget(5, 10*time.Second), objstore.WithAzureStallTimeout(time.Second))
	err = slow.ReadAt(ctx, objstore.Object{URI: obj.URI}, make([]byte, 40_000), 0)
	<-replaced
	if !errors.Is(err, objstore.ErrNotFound) || !strings.Contains(err.Error(), "while it was read") {
		t.Errorf("ReadAt(bare, replaced between attempts) = %v, want ErrNotFound saying it was replaced while read", err)
	}
	if _, ranges := proxy.Seen(); len(ranges) < 2 || ranges[len(ranges)-1] != "bytes=1000-39999" {
		t.Errorf("ranges %q, want the last a resume at byte 1000", ranges)
	}
}

// TestAzureContextCancel: a stalled read returns when the caller's context
// ends, long before the stall timeout.
func TestAzureContextCancel(t *testing.T) {
	proxy, store, obj, _ := azFaultSetup(t, 1000, objstore.WithAzureStallTimeout(time.Minute))
	proxy.Arm(objstoretest.FaultStall, 0, 0, -1)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := store.ReadAt(ctx, obj, make([]byte, 10), 0)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("ReadAt with a 300ms context = %v after %v, want DeadlineExceeded soon", err, time.Since(start))
	}
}

// BenchmarkAzureRangedRead compares raw ranged downloads through the azblob
// SDK (a client of its own, DownloadStream + ReadFull) with
// AzureStore.ReadAt on the same Azurite, so that the store's overhead
// (tracking transport, watchdog, ETag pinning, retry loop) shows.
func BenchmarkAzureRangedRead(b *testing.B) {
	const objSize = 32 << 20
	az := objstoretest.SharedAzurite(b)
	c := az.Container(b)
	store := az.Store(b)
	data := make([]byte, objSize)
	for i := range data {
		data[i] = byte(i * 7)
	}
	obj := objstoretest.PutObject(b, store, "az://"+c+"/obj.bin", data)
	ctx := context.Background()
	cred, err := azblob.NewSharedKeyCredential(objstoretest.AzuriteAccount, objstoretest.AzuriteKey)
	if err != nil {
		b.Fatal(err)
	}
	raw, err := azblob.NewClientWithSharedKeyCredential(az.URL+"/", cred, nil)
	if err != nil {
		b.Fatal(err)
	}
	handle := raw.ServiceClient().NewContainerClient(c).NewBlobClient("obj.bin")
	for _, size := range []int{1 << 20, 8 << 20} {
		p := make([]byte, size)
		offset := func(i int) int64 { return int64(i*size/3) % int64(objSize-size) }
		b.Run(fmt.Sprintf("raw/%dMiB", size>>20), func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				resp, err := handle.DownloadStream(ctx, &blob.DownloadStreamOptions{Range: blob.HTTPRange{Offset: offset(i), Count: int64(size)}})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(resp.Body, p); err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
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

// TestAzureSkipsFolderMarkers: accounts with a hierarchical namespace (ADLS
// Gen2, what abfs:// usually names) list each directory as an empty blob
// with metadata hdi_isfolder=true; List and Match leave them out, so a glob
// or a directory expansion yields files only.
func TestAzureSkipsFolderMarkers(t *testing.T) {
	ctx := context.Background()
	az := objstoretest.SharedAzurite(t)
	c := az.Container(t)
	store := az.Store(t)
	objstoretest.PutObject(t, store, "az://"+c+"/ds/part-0.parquet", []byte("x"))
	cred, err := azblob.NewSharedKeyCredential(objstoretest.AzuriteAccount, objstoretest.AzuriteKey)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := azblob.NewClientWithSharedKeyCredential(az.URL+"/", cred, nil)
	if err != nil {
		t.Fatal(err)
	}
	yes := "true"
	for _, dir := range []string{"ds", "ds/sub"} {
		if _, err := raw.UploadBuffer(ctx, c, dir, nil, &azblob.UploadBufferOptions{Metadata: map[string]*string{"hdi_isfolder": &yes}}); err != nil {
			t.Fatal(err)
		}
	}
	objs, err := store.List(ctx, "abfs://"+c+"/ds")
	if want := []string{"abfs://" + c + "/ds/part-0.parquet"}; err != nil || !slices.Equal(uriList(objs), want) {
		t.Errorf("List = %q, %v; want %q (no folder markers)", uriList(objs), err, want)
	}
	for _, pat := range []string{"az://" + c + "/ds", "az://" + c + "/**"} {
		m, err := objstore.Match(ctx, store, []string{pat})
		if want := []string{"az://" + c + "/ds/part-0.parquet"}; err != nil || !slices.Equal(uriList(m), want) {
			t.Errorf("Match(%q) = %q, %v; want %q", pat, uriList(m), err, want)
		}
	}
}

func uriList(objs []objstore.Object) []string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = o.URI
	}
	return out
}

// TestAzureReadsStoredBytes: a blob stored with Content-Encoding gzip is
// read as stored (its listed size, any range of it), not inflated by the
// HTTP client.
func TestAzureReadsStoredBytes(t *testing.T) {
	ctx := context.Background()
	az := objstoretest.SharedAzurite(t)
	c := az.Container(t)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(bytes.Repeat([]byte("meshfeed "), 10_000))
	zw.Close()
	cred, err := azblob.NewSharedKeyCredential(objstoretest.AzuriteAccount, objstoretest.AzuriteKey)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := azblob.NewClientWithSharedKeyCredential(az.URL+"/", cred, nil)
	if err != nil {
		t.Fatal(err)
	}
	enc := "gzip"
	if _, err := raw.UploadBuffer(ctx, c, "x.gz", gz.Bytes(), &azblob.UploadBufferOptions{HTTPHeaders: &blob.HTTPHeaders{BlobContentEncoding: &enc}}); err != nil {
		t.Fatal(err)
	}
	store := az.Store(t)
	obj, err := store.Stat(ctx, "az://"+c+"/x.gz")
	if err != nil || obj.Size != int64(gz.Len()) {
		t.Fatalf("Stat = %+v, %v; want size %d", obj, err, gz.Len())
	}
	checkRead(t, store, obj, gz.Bytes(), 0, obj.Size)
	checkRead(t, store, obj, gz.Bytes(), 10, 20)
}
