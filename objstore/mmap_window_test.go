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

// Drop gives back the whole pages of its range (not the pages it cuts):
// they leave the process's page tables (smaps) and BytesDropped counts
// them; the bytes handed out before still read right (touched, a page
// faults back in), and Bytes does not populate them again (a reader hands
// out a compressed page again that it takes decompressed, never touching
// it). After Release it does nothing.
func TestWindowDrop(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("mmap is Linux only")
	}
	ctx := context.Background()
	page := int64(os.Getpagesize())
	content, path, s, obj := mappedFile(t, int(64*page), 11)
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
