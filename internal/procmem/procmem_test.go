package procmem

import (
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
)

// FileRSS counts the pages of a mapped file that were touched, and none
// once it is unmapped.
func TestFileRSS(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("smaps is Linux only")
	}
	page := os.Getpagesize()
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, make([]byte, 8*page), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := syscall.Mmap(int(f.Fd()), 0, 8*page, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	var sum byte
	for i := 0; i < 3; i++ {
		sum += m[i*2*page] // pages 0, 2, 4
	}
	got, err := FileRSS(path)
	if err != nil {
		t.Fatal(err)
	}
	// Fault-around may map neighbours of a touched page too.
	if got < 3*int64(page) || got > 8*int64(page) {
		t.Errorf("FileRSS %d after touching 3 of 8 pages (sum %d), want 3 to 8 pages", got, sum)
	}
	if err := syscall.Munmap(m); err != nil {
		t.Fatal(err)
	}
	if got, err := FileRSS(path); err != nil || got != 0 {
		t.Errorf("FileRSS %d, %v after munmap, want 0", got, err)
	}
}
