package objstoretest

import (
	"context"
	"testing"
	"time"

	"github.com/meshfeed/meshfeed/objstore"
)

// TestLatencyFront checks that the front adds its latency, bounds the
// aggregate bandwidth and counts what it forwards.
func TestLatencyFront(t *testing.T) {
	gcs := NewFakeGCS(t, "b")
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	obj := gcs.Put(t, gcs.Store(t), URI("b", "o"), data)
	front := NewLatencyFront(t, gcs.URL, 50*time.Millisecond, 4<<20) // 1 MiB takes 250 ms
	store := NewStore(t, front.URL())
	got := make([]byte, len(data))
	start := time.Now()
	if err := store.ReadAt(context.Background(), obj, got, 0); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if string(got) != string(data) {
		t.Fatal("bytes through the front differ from the object")
	}
	if took < 250*time.Millisecond {
		t.Errorf("1 MiB at 4 MiB/s with 50 ms latency took %v, want at least 250 ms", took)
	}
	if front.Requests() < 1 || front.BodyBytes() < int64(len(data)) {
		t.Errorf("front counted %d requests, %d body bytes; want >= 1 and >= %d", front.Requests(), front.BodyBytes(), len(data))
	}
	var _ objstore.Store = store
}
