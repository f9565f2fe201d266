package objstore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"runtime"
	"testing"

	"github.com/meshfeed/meshfeed/internal/procmem"
)

// A window hands out parts of its range without copying, refuses parts
// outside it, counts each page it populates once in BytesMapped (and itself
// as one Map), and is gone from LiveMaps once released (twice is fine).
func TestLocalStoreMapWindow(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("mmap is Linux only")
	}
	ctx := context.Background()
	page := int64(os.Getpagesize())
	content, _, s, obj := mappedFile(t, int(8*page+100), 9)
	if _, err := s.MapWindow(ctx, obj, 10, int64(len(content))); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a window past the end: %v, want io.ErrUnexpectedEOF", err)
	}
	off, n := page+10, 5*page // pages 1..6 of the file
	w, err := s.MapWindow(ctx, obj, off, n)
	if err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Maps.Load() != 1 || st.LiveMaps.Load() != 1 || st.BytesMapped.Load() != 0 {
		t.Fatalf("after MapWindow: %d maps, %d live, %d bytes mapped; want 1, 1 and 0 (nothing populated yet)", st.Maps.Load(), st.LiveMaps.Load(), st.BytesMapped.Load())
	}
	for _, r := range [][2]int64{{off, 100}, {off + 50, page}, {off + 3*page, 2*page - 10}} {
		b, ok, err := w.Bytes(r[0], r[1])
		if err != nil || !ok {
			t.Fatalf("Bytes(%d, %d) = %v, %v", r[0], r[1], ok, err)
		}
		if !bytes.Equal(b, content[r[0]:r[0]+r[1]]) {
			t.Fatalf("Bytes(%d, %d): wrong bytes", r[0], r[1])
		}
	}
	// Pages 1 and 2 of the file for the first two parts (the second's
	// first page again), pages 4 and 5 for the third.
	if got := st.BytesMapped.Load(); got != 4*page {
		t.Errorf("%d bytes populated, want %d (each page once)", got, 4*page)
	}
	for _, r := range [][2]int64{{off - 1, 10}, {off + n - 5, 10}} {
		if _, ok, err := w.Bytes(r[0], r[1]); ok || err != nil {
			t.Errorf("Bytes(%d, %d) outside the window = %v, %v; want false, nil", r[0], r[1], ok, err)
		}
	}
	w.Release()
	w.Release()
	if live := st.LiveMaps.Load(); live != 0 {
		t.Errorf("%d mappings live after Release", live)
	}
	if _, ok, _ := w.Bytes(off, 10); ok {
		t.Error("Bytes after Release handed out bytes")
	}
}

// mappedRSS returns the bytes of the file at path in this process's page
// tables.
func mappedRSS(t *testing.T, path string) int64 {
	t.Helper()
	n, err := procmem.FileRSS(path)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// With WithDropBatch, Drop holds pages back until the batch's bytes of
// them are pending over the store's windows, then gives them all back in
// one system call (process_madvise; a call per run where the kernel has
// none for the process itself): before, they stay in the page tables and
// BytesDropped counts nothing; after, none is left and BytesDropped counts
// them all. A run that meets a queued one of its window joins it. A window
// released with runs queued takes them with it: nothing of it is given
// back later, when the range may be mapped again.
func TestWindowDropBatched(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("mmap is Linux only")
	}
	ctx := context.Background()
	page := int64(os.Getpagesize())
	content, path, s, obj := mappedFile(t, int(64*page), 11, WithDropBatch(16*page))
	half := 32 * page
	w1, err := s.MapWindow(ctx, obj, 0, half)
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Release()
	w2, err := s.MapWindow(ctx, obj, half, half)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Release()
	b1, _, err := w1.Bytes(0, half)
	if err != nil {
		t.Fatal(err)
	}
	b2, _, err := w2.Bytes(half, half)
	if err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	check := func(when string, queued, dropped, resident int64) {
		t.Helper()
		if got := s.drops.queued(); got != queued*page {
			t.Errorf("%s: %d bytes queued, want %d pages", when, got, queued)
		}
		if got := st.BytesDropped.Load(); got != dropped*page {
			t.Errorf("%s: BytesDropped %d, want %d pages", when, got, dropped)
		}
		if got := mappedRSS(t, path); got != resident*page {
			t.Errorf("%s: %d bytes of the file resident, want %d pages", when, got, resident)
		}
	}
	check("populated", 0, 0, 64)
	batched := !noBatchDrops.Load()
	calls := s.drops.calls.Load()
	w1.Drop(0, 4*page)
	w2.Drop(half, 4*page)
	w1.Drop(4*page, 4*page) // joins w1's run
	if batched {
		check("12 pages dropped", 12, 0, 64)
		if n := len(s.drops.runs); n != 2 {
			t.Errorf("%d runs queued, want 2 (w1's joined)", n)
		}
	}
	w2.Drop(half+8*page, 4*page) // 16 pages: all given back
	check("16 pages dropped", 0, 16, 48)
	batched = batched && !noBatchDrops.Load()
	if got := s.drops.calls.Load() - calls; batched && got != 1 {
		t.Errorf("%d system calls gave the pages back, want 1", got)
	}
	t.Logf("batched (process_madvise): %v; %d system calls", batched, s.drops.calls.Load()-calls)
	if !bytes.Equal(b1, content[:half]) || !bytes.Equal(b2, content[half:]) { // touched: they fault back in
		t.Fatal("the bytes handed out read differently after Drop")
	}
	check("touched again", 0, 16, 64)
	w1.Drop(0, 8*page)
	w2.Drop(half, 4*page)
	if batched {
		check("12 pages queued", 12, 16, 64)
	}
	w1.Release()
	if batched {
		check("w1 released", 4, 16, 32)
	}
	w2.Drop(half+4*page, 12*page)
	if batched {
		check("w2's 16 pages", 0, 32, 16)
	}
}

// Drop gives back the whole pages of its range (not the pages it cuts):
// they leave the process's page tables (smaps) and BytesDropped counts
// them; the bytes handed out before still read right (touched, a page
// faults back in), and Bytes does not populate them again (a reader hands
// out a compressed page again that it takes decompressed, never touching
// it). After Release it does nothing. (Each Drop at once: WithDropBatch(0);
// TestWindowDropBatched holds them back.)
func TestWindowDrop(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("mmap is Linux only")
	}
	ctx := context.Background()
	page := int64(os.Getpagesize())
	content, path, s, obj := mappedFile(t, int(64*page), 11, WithDropBatch(0))
	w, err := s.MapWindow(ctx, obj, 0, int64(len(content)))
	if err != nil {
		t.Fatal(err)
	}
	all, ok, err := w.Bytes(0, int64(len(content)))
	if err != nil || !ok || !bytes.Equal(all, content) {
		t.Fatalf("Bytes of the whole window: %v, %v, equal %v", ok, err, bytes.Equal(all, content))
	}
	st := s.Stats()
	if got := mappedRSS(t, path); got != 64*page {
		t.Fatalf("%d bytes of the file resident after Bytes of its 64 pages, want %d", got, 64*page)
	}
	// [page/2, 40.5 pages): pages 1..39 are whole inside it; 0 and 40 are cut.
	w.Drop(page/2, 40*page)
	if got, want := st.BytesDropped.Load(), 39*page; got != want {
		t.Errorf("BytesDropped %d, want %d (the 39 whole pages)", got, want)
	}
	if got, want := mappedRSS(t, path), 25*page; got != want {
		t.Errorf("%d bytes of the file resident after Drop, want %d", got, want)
	}
	mapped := st.BytesMapped.Load()
	b, ok, err := w.Bytes(page, 30*page)
	if err != nil || !ok {
		t.Fatalf("Bytes after Drop: %v, %v", ok, err)
	}
	if got := st.BytesMapped.Load() - mapped; got != 0 {
		t.Errorf("Bytes after Drop populated %d bytes, want none", got)
	}
	if got, want := mappedRSS(t, path), 25*page; got != want {
		t.Errorf("%d bytes of the file resident after Bytes of dropped pages (untouched), want %d", got, want)
	}
	if !bytes.Equal(b, content[page:31*page]) || !bytes.Equal(all, content) { // touched: they fault back in
		t.Fatal("the bytes handed out before or after Drop read differently")
	}
	w.Release()
	w.Drop(0, int64(len(content))) // nothing mapped: nothing to do
	if got := mappedRSS(t, path); got != 0 {
		t.Errorf("%d bytes of the file resident after Release", got)
	}
}
