package loader

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"

	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/objstore/objstoretest"
)

// readAll reads refs with opts and returns the records (the caller
// releases them) and the reader's stats.
func readAll(t *testing.T, ds *Dataset, refs []RowGroupRef, mem memory.Allocator, opts ...ReaderOption) ([]arrow.RecordBatch, *ReadStats) {
	t.Helper()
	rd := ds.NewReader(context.Background(), refs, mem, opts...)
	defer rd.Close()
	var out []arrow.RecordBatch
	for {
		rec, _, err := rd.Next()
		if err == io.EOF {
			return out, rd.Stats()
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rec)
	}
}

func releaseAll(recs []arrow.RecordBatch) {
	for _, r := range recs {
		r.Release()
	}
}

// TestHeldChunksReadOnce: a plan's reader reads the id and label columns
// of two row groups and keeps id (WithReaderKeep); a stream's readers then
// read those row groups (one whole, one in pieces, with and without a page
// index, uncompressed and SNAPPY) with id, label and features: their
// records equal those of readers without the held bytes, and every byte of
// the kept id chunks is read from storage once in all (plan and stream),
// where without them the stream reads them again; the held bytes are
// dropped once the claiming readers are done.
func TestHeldChunksReadOnce(t *testing.T) {
	rec := fastRecord(0, 40000)
	defer rec.Release()
	dir := t.TempDir()
	for _, c := range []struct {
		codec compress.Compression
		index bool
	}{{compress.Codecs.Uncompressed, false}, {compress.Codecs.Snappy, false}, {compress.Codecs.Uncompressed, true}} {
		t.Run(fmt.Sprintf("%v/index=%v", c.codec, c.index), func(t *testing.T) {
			path := filepath.Join(dir, fmt.Sprintf("held_%v_%v.parquet", c.codec, c.index))
			writeFastFile(t, path, []arrow.RecordBatch{rec}, pq.WithDictionaryDefault(false), pq.WithMaxRowGroupLength(10000),
				pq.WithDataPageSize(16<<10), pq.WithPageIndexEnabled(c.index), pq.WithCompression(c.codec))
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			local := objstore.NewLocalStore()
			defer local.Close()
			store := &objstoretest.RangeReads{Store: local}
			open := func(cols ...string) *Dataset {
				ds, err := Open(context.Background(), store, []string{path}, WithColumns(cols...), WithFooterCache(nil))
				if err != nil {
					t.Fatal(err)
				}
				return ds
			}
			plan, stream := open("id", "label"), open("id", "label", "features")
			rgs := stream.RowGroups()
			whole, cut := rgs[1], rgs[2]
			p1, p2 := cut, cut
			p1.Start, p1.End = 1234, 5000
			p2.Start, p2.End = 5000, 9999
			refs := []RowGroupRef{whole, p1, p2, rgs[3]}

			want, _ := readAll(t, stream, refs, mem)
			defer releaseAll(want)
			idChunk := func(rg int) Chunk {
				for _, ch := range stream.Files[0].RowGroups[rg].Chunks {
					if ch.Column == "id" {
						return ch
					}
				}
				t.Fatal("no id chunk")
				return Chunk{}
			}
			readIDs := func() (n int64) {
				for _, rg := range []int{1, 2} {
					ch := idChunk(rg)
					n += store.Within(path, ch.Offset, ch.Offset+ch.Length)
				}
				return n
			}
			chunks := idChunk(1).Length + idChunk(2).Length

			for _, held := range []bool{true, false} {
				store.Reset()
				h := NewHeldChunks(64<<20, time.Minute, nil)
				keep := h.NewKeeper("id")
				if !held {
					keep = nil
				}
				recs, _ := readAll(t, plan, []RowGroupRef{rgs[1], rgs[2]}, mem, WithReaderKeep(keep))
				releaseAll(recs)
				if held && h.Held() != chunks {
					t.Fatalf("held %d bytes after the plan, want the two id chunks' %d", h.Held(), chunks)
				}
				h.Claim(stream.Files[0].Object, 1, 1)
				h.Claim(stream.Files[0].Object, 2, 1)
				got, st := readAll(t, stream, refs, mem, WithReaderHeld(h))
				if len(got) != len(want) {
					t.Fatalf("held=%v: %d records, want %d", held, len(got), len(want))
				}
				for i := range got {
					if !array.RecordEqual(got[i], want[i]) {
						t.Errorf("held=%v: record %d (%+v) differs from the one read without held bytes", held, i, refs[i])
					}
				}
				releaseAll(got)
				n := readIDs()
				t.Logf("held=%v: the id chunks (%d bytes) read %d bytes in plan and stream; %d taken from held bytes", held, chunks, n, st.HeldBytes.Load())
				switch {
				case held && n != chunks:
					t.Errorf("with held bytes the id chunks' bytes were read %d times over (%d bytes), want once (%d)", n/chunks, n, chunks)
				case held && st.HeldBytes.Load() < idChunk(1).Length:
					t.Errorf("the stream took %d bytes from the held ones, want at least the whole row group's id chunk (%d)", st.HeldBytes.Load(), idChunk(1).Length)
				case !held && n <= chunks:
					t.Errorf("without held bytes the id chunks' bytes were read %d bytes, want more than once (%d): the test does not measure the reuse", n, chunks)
				}
				if h.Held() != 0 {
					t.Errorf("held=%v: %d bytes still held after the claiming reader is done, want 0", held, h.Held())
				}
				h.Close()
			}
		})
	}
}

// TestHeldChunksWholeReadsBetweenChunks: a held chunk between two others
// that a whole row group read fetches (label between id and features) is
// taken from memory, the others fetched around it, and the record is the
// same.
func TestHeldChunksWholeReadsBetweenChunks(t *testing.T) {
	rec := fastRecord(0, 20000)
	defer rec.Release()
	path := filepath.Join(t.TempDir(), "between.parquet")
	writeFastFile(t, path, []arrow.RecordBatch{rec}, pq.WithDictionaryDefault(false), pq.WithMaxRowGroupLength(10000))
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	local := objstore.NewLocalStore()
	defer local.Close()
	store := &objstoretest.RangeReads{Store: local}
	ds, err := Open(context.Background(), store, []string{path}, WithColumns("id", "label", "features"), WithFooterCache(nil))
	if err != nil {
		t.Fatal(err)
	}
	refs := ds.RowGroups()
	want, _ := readAll(t, ds, refs, mem)
	defer releaseAll(want)
	h := NewHeldChunks(64<<20, time.Minute, nil)
	recs, _ := readAll(t, ds, refs[:1], mem, WithReaderKeep(h.NewKeeper("label")))
	releaseAll(recs)
	var label Chunk
	for _, ch := range ds.Files[0].RowGroups[0].Chunks {
		if ch.Column == "label" {
			label = ch
		}
	}
	store.Reset()
	got, st := readAll(t, ds, refs, mem, WithReaderHeld(h))
	defer releaseAll(got)
	for i := range got {
		if !array.RecordEqual(got[i], want[i]) {
			t.Errorf("row group %d read with label held differs", i)
		}
	}
	if n := store.Within(path, label.Offset, label.Offset+label.Length); n != 0 || st.HeldBytes.Load() != label.Length {
		t.Errorf("the held label chunk (%d bytes): %d bytes of it read again, %d taken from memory; want 0 and all", label.Length, n, st.HeldBytes.Load())
	}
}

// fakeAccount is a memory account with a limit.
type fakeAccount struct {
	mu          sync.Mutex
	limit, used int64
}

func (a *fakeAccount) TryReserve(n int64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.used+n > a.limit {
		return false
	}
	a.used += n
	return true
}

func (a *fakeAccount) Unreserve(n int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.used -= n
}

func (a *fakeAccount) inUse() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.used
}

// TestHeldChunksBounds: what a HeldChunks holds stays within its bound (a
// later plan displaces an earlier one's row groups, never its own), its
// memory account (a keep that does not fit is not kept; every drop returns
// its bytes), and its time limit; claims drop a row group after the last
// claiming reader is done; Drop, Shed and Close drop.
func TestHeldChunksBounds(t *testing.T) {
	obj := objstore.Object{URI: "mem://a.parquet", Size: 1 << 20, Generation: 7}
	b := make([]byte, 40)
	for i := range b {
		b[i] = byte(i)
	}
	acct := &fakeAccount{limit: 1000}
	h := NewHeldChunks(100, time.Hour, func() Account { return acct })
	a, c := h.NewKeeper("x"), h.NewKeeper("x")
	for rg := range 3 {
		h.keep(a, obj, rg, 1000*int64(rg), b)
	}
	if !h.HeldRowGroup(obj, 0) || !h.HeldRowGroup(obj, 1) || h.HeldRowGroup(obj, 2) || h.Held() != 80 {
		t.Errorf("one plan keeping 3 x 40 bytes under a bound of 100: held %d, row groups 0, 1, 2 held %v %v %v; want the first two (80)",
			h.Held(), h.HeldRowGroup(obj, 0), h.HeldRowGroup(obj, 1), h.HeldRowGroup(obj, 2))
	}
	if got, ok := h.bytes(obj, 1, 1010, 20, true); !ok || got[0] != 10 || len(got) != 20 {
		t.Errorf("bytes [1010, 1030) of row group 1 = %v, %v; want the held bytes 10..29", got, ok)
	}
	if _, ok := h.bytes(obj, 1, 1030, 20, true); ok {
		t.Error("bytes past the held range served")
	}
	if _, ok := h.bytes(objstore.Object{URI: obj.URI, Size: obj.Size, Generation: 8}, 1, 1010, 20, true); ok {
		t.Error("bytes of another generation of the object served")
	}
	h.keep(c, obj, 5, 5000, b) // a later plan: displaces the earlier plan's oldest
	if h.HeldRowGroup(obj, 0) || !h.HeldRowGroup(obj, 5) || h.Held() != 80 || acct.inUse() != 80 {
		t.Errorf("a later plan's keep: held %d (account %d), row group 0 held %v, 5 held %v; want 0 displaced, 5 held, 80",
			h.Held(), acct.inUse(), h.HeldRowGroup(obj, 0), h.HeldRowGroup(obj, 5))
	}

	// Claims.
	h.Claim(obj, 1, 2)
	h.done(obj, 1)
	if !h.HeldRowGroup(obj, 1) {
		t.Error("row group 1 dropped after one of its two claiming readers was done")
	}
	h.done(obj, 1)
	h.done(obj, 5) // not claimed: kept until its time is up
	if h.HeldRowGroup(obj, 1) || !h.HeldRowGroup(obj, 5) || acct.inUse() != 40 {
		t.Errorf("after the claiming readers: row group 1 held %v, 5 held %v, account %d; want false, true, 40",
			h.HeldRowGroup(obj, 1), h.HeldRowGroup(obj, 5), acct.inUse())
	}
	h.Drop(obj, 5)
	if h.Held() != 0 || acct.inUse() != 0 {
		t.Errorf("after Drop: held %d, account %d; want 0", h.Held(), acct.inUse())
	}

	// The account: a keep that does not fit is not kept.
	acct.limit = 50
	h.keep(a, obj, 6, 6000, b)
	h.keep(c, obj, 7, 7000, b)
	if !h.HeldRowGroup(obj, 6) || h.HeldRowGroup(obj, 7) || acct.inUse() != 40 {
		t.Errorf("account of 50: row groups 6, 7 held %v %v, account %d; want true false 40", h.HeldRowGroup(obj, 6), h.HeldRowGroup(obj, 7), acct.inUse())
	}
	h.Shed()
	if h.Held() != 0 || acct.inUse() != 0 {
		t.Errorf("after Shed: held %d, account %d; want 0", h.Held(), acct.inUse())
	}

	// Time limit.
	acct.limit = 1000
	ht := NewHeldChunks(100, 20*time.Millisecond, func() Account { return acct })
	ht.keep(ht.NewKeeper("x"), obj, 0, 0, b)
	if !ht.HeldRowGroup(obj, 0) {
		t.Fatal("not kept")
	}
	for deadline := time.Now().Add(10 * time.Second); ht.Held() != 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if ht.Held() != 0 || acct.inUse() != 0 {
		t.Errorf("after its time limit: held %d, account %d; want 0", ht.Held(), acct.inUse())
	}

	// Close.
	h.keep(a, obj, 8, 8000, b)
	h.Close()
	h.keep(a, obj, 9, 9000, b)
	if h.Held() != 0 || acct.inUse() != 0 {
		t.Errorf("after Close: held %d, account %d; want 0", h.Held(), acct.inUse())
	}
	if NewHeldChunks(0, time.Minute, nil) != nil || NewHeldChunks(100, 0, nil) != nil {
		t.Error("a HeldChunks of no bytes or no time is not nil")
	}
}

// TestWithHeld: held spans go between the fetched ones, sorted; one inside
// a fetched span is left out.
func TestWithHeld(t *testing.T) {
	fetched := []span{{off: 0, n: 100}, {off: 300, n: 50}}
	kept := []span{{off: 40, n: 20}, {off: 100, n: 200}, {off: 400, n: 10}}
	got := withHeld(fetched, kept)
	want := [][2]int64{{0, 100}, {100, 200}, {300, 50}, {400, 10}}
	if len(got) != len(want) {
		t.Fatalf("withHeld = %v, want spans %v", got, want)
	}
	for i, s := range got {
		if [2]int64{s.off, s.n} != want[i] {
			t.Errorf("span %d = [%d, +%d), want %v", i, s.off, s.n, want[i])
		}
	}
	if sp := coalesce([]Chunk{{Offset: 0, Length: 10}, {Offset: 30, Length: 10}}, 100, 1000, []span{{off: 10, n: 20}}); len(sp) != 2 {
		t.Errorf("coalesce across a held range = %v, want the two chunks apart", sp)
	}
	if sp := coalesce([]Chunk{{Offset: 0, Length: 10}, {Offset: 30, Length: 10}}, 100, 1000, nil); len(sp) != 1 {
		t.Errorf("coalesce of two chunks 20 bytes apart = %v, want one range", sp)
	}
}
