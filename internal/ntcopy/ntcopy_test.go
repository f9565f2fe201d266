package ntcopy

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/meshfeed/meshfeed/internal/testseed"
)

// Copy writes exactly what copy writes, for every length around Min and
// the 64-byte lines and every misalignment of either side, and no byte
// outside dst[:n]: a guard of 0xEE on both sides stays.
func TestCopyEqualsCopy(t *testing.T) {
	rng := rand.New(rand.NewPCG(testseed.Get(t, 0, ""), 1))
	src := make([]byte, 3*Min+256)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	lengths := []int{0, 1, 63, 64, Min - 1, Min, Min + 1, Min + 63, Min + 64, 2*Min + 65, 3 * Min}
	for i := 0; i < 20; i++ {
		lengths = append(lengths, rng.IntN(3*Min))
	}
	const guard = 0xEE
	for _, n := range lengths {
		for _, dOff := range []int{0, 1, 7, 16, 33, 63} {
			for _, sOff := range []int{0, 5, 64, 129} {
				buf := bytes.Repeat([]byte{guard}, n+dOff+128)
				dst := buf[64+dOff : 64+dOff+n]
				s := src[sOff : sOff+n]
				if got := Copy(dst, s); got != n {
					t.Fatalf("n %d: Copy returned %d", n, got)
				}
				if !bytes.Equal(dst, s) {
					t.Fatalf("n %d, dst off %d, src off %d: the bytes differ from the source", n, dOff, sOff)
				}
				for j, b := range buf {
					if (j < 64+dOff || j >= 64+dOff+n) && b != guard {
						t.Fatalf("n %d, dst off %d: byte %d outside dst overwritten (%#x)", n, dOff, j-64-dOff, b)
					}
				}
			}
		}
	}
	// Shorter of the two, as copy.
	if got := Copy(make([]byte, Min), src[:Min+100]); got != Min {
		t.Errorf("Copy into a shorter dst returned %d, want %d", got, Min)
	}
	if got := Copy(make([]byte, 2*Min), src[:Min+100]); got != Min+100 {
		t.Errorf("Copy from a shorter src returned %d, want %d", got, Min+100)
	}
}

// BenchmarkCopyScattered writes 20 KiB runs of a 512 MiB source into
// 64 KiB buffers a third at a time, as a mixture's decoder writes a page
// into the slices of the steps that take it: Copy against copy.
func BenchmarkCopyScattered(b *testing.B) {
	const seg, total = 21760, 256 << 20
	src := make([]byte, total)
	for i := range src {
		src[i] = byte(i)
	}
	n := total / seg
	slots := make([][]byte, n)
	for i := range slots {
		slots[i] = make([]byte, 64<<10)
		for j := range slots[i] {
			slots[i][j] = 1
		}
	}
	for _, c := range []struct {
		name string
		f    func(dst, src []byte) int
	}{{"copy", func(dst, src []byte) int { return copy(dst, src) }}, {"ntcopy", Copy}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(n * seg))
			for i := 0; i < b.N; i++ {
				for s := 0; s < n; s++ {
					c.f(slots[s][(s%3)*seg:(s%3+1)*seg], src[s*seg:(s+1)*seg])
				}
			}
		})
	}
}

// BenchmarkShortRunsScattered writes runs of 256 bytes to 4 KiB, each into
// lines not in cache (a run every four runs' length over 256 MiB), with
// copy and with non-temporal stores whatever the length (what Copy would
// do below Min): where Min stands. The id and label runs a mixture's
// pages write into the slices are 340 to 680 bytes.
func BenchmarkShortRunsScattered(b *testing.B) {
	const total = 256 << 20
	src := make([]byte, 4<<20)
	for i := range src {
		src[i] = byte(i)
	}
	dst := make([]byte, total)
	for i := range dst {
		dst[i] = 1
	}
	nt := func(dst, src []byte) int {
		n := min(len(dst), len(src))
		h := min(head(dst), n)
		copy(dst[:h], src[:h])
		body := (n - h) &^ 63
		lines(dst[h:h+body], src[h:h+body]) // copy where no non-temporal stores
		copy(dst[h+body:n], src[h+body:n])
		return n
	}
	for _, run := range []int{256, 680, 1024, 2048, 4096} {
		for _, c := range []struct {
			name string
			f    func(dst, src []byte) int
		}{{"copy", func(dst, src []byte) int { return copy(dst, src) }}, {"nt", nt}} {
			b.Run(fmt.Sprintf("%d/%s", run, c.name), func(b *testing.B) {
				stride := (4*run + 63) &^ 63
				n := total / stride
				b.SetBytes(int64(n * run))
				for i := 0; i < b.N; i++ {
					for s := 0; s < n; s++ {
						at := (s * run) % (len(src) - run)
						c.f(dst[s*stride:s*stride+run], src[at:at+run])
					}
				}
			})
		}
	}
}
