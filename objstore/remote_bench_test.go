package objstore_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/meshfeed/meshfeed/objstore/objstoretest"
)

// benchObject is the 32 MiB object the remote-store benchmarks read.
func benchObject() []byte {
	data := make([]byte, 32<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	return data
}

// rawRangedGet reads [off, off+len(p)) of url with one plain net/http GET
// (what a store adds its retries, pinning and checks to), with hdr set.
func rawRangedGet(b *testing.B, c *http.Client, url string, hdr http.Header, p []byte, off int64) {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("Range", "bytes="+strconv.FormatInt(off, 10)+"-"+strconv.FormatInt(off+int64(len(p))-1, 10))
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent {
		b.Fatalf("raw GET: %s", resp.Status)
	}
	if _, err := io.ReadFull(resp.Body, p); err != nil {
		b.Fatal(err)
	}
}

// benchSizes runs read (one ranged read of size bytes at off) over the
// sizes, one sub-benchmark per kind and size.
func benchSizes(b *testing.B, kind string, read func(p []byte, off int64)) {
	const objSize = 32 << 20
	for _, size := range []int{1 << 20, 8 << 20} {
		p := make([]byte, size)
		offset := func(i int) int64 { return int64(i*size/3) % int64(objSize-size) }
		b.Run(fmt.Sprintf("%s/%dMiB", kind, size>>20), func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				read(p, offset(i))
			}
		})
	}
}

// BenchmarkS3ReadAt compares S3Store.ReadAt with a raw net/http ranged GET
// loop and with the SDK's GetObject alone, on the same in-process gofakes3
// emulator, so the store's overhead (tracking transport, watchdog, ETag
// pinning, SigV4 signing) shows.
func BenchmarkS3ReadAt(b *testing.B) {
	fake := objstoretest.NewFakeS3(b, "bench")
	store := fake.Store(b)
	obj := objstoretest.PutObject(b, store, "s3://bench/obj.bin", benchObject())
	ctx := context.Background()
	// gofakes3 checks no signature; FakeS3 wants the access key named.
	hdr := http.Header{"Authorization": {"AWS4-HMAC-SHA256 Credential=" + objstoretest.FakeS3AccessKey + "/20260101/us-east-1/s3/aws4_request"}}
	client := &http.Client{}
	benchSizes(b, "rawhttp", func(p []byte, off int64) { rawRangedGet(b, client, fake.URL+"/bench/obj.bin", hdr, p, off) })
	benchSizes(b, "sdk", func(p []byte, off int64) {
		out, err := store.Client().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bench"), Key: aws.String("obj.bin"),
			Range: aws.String(fmt.Sprintf("bytes=%d-%d", off, off+int64(len(p))-1))})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(out.Body, p); err != nil {
			b.Fatal(err)
		}
		out.Body.Close()
	})
	benchSizes(b, "store", func(p []byte, off int64) {
		if err := store.ReadAt(ctx, obj, p, off); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkHTTPSReadAt compares HTTPSStore.ReadAt with a raw net/http
// ranged GET loop on the same FakeHTTP (plain loopback HTTP, so TLS costs
// do not hide the store's).
func BenchmarkHTTPSReadAt(b *testing.B) {
	fake := objstoretest.NewFakeHTTP(b, false)
	fake.Write(b, "obj.bin", benchObject())
	store := fake.Store(b)
	ctx := context.Background()
	obj, err := store.Stat(ctx, fake.URI("obj.bin"))
	if err != nil {
		b.Fatal(err)
	}
	client := &http.Client{}
	benchSizes(b, "rawhttp", func(p []byte, off int64) { rawRangedGet(b, client, fake.URI("obj.bin"), nil, p, off) })
	benchSizes(b, "store", func(p []byte, off int64) {
		if err := store.ReadAt(ctx, obj, p, off); err != nil {
			b.Fatal(err)
		}
	})
}
