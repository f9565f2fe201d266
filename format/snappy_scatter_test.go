package format

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/snappy"
)

// scatterData returns n bytes of runs of random bytes and of short
// repeating patterns (long and overlapping copies, literals of every
// length class).
func scatterData(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := 0; i < n; {
		k := min(n-i, 1+r.IntN(3000))
		switch r.IntN(3) {
		case 0:
			for j := i; j < i+k; j++ {
				b[j] = byte(r.Uint32())
			}
		case 1:
			period := 1 + r.IntN(9)
			for j := i; j < i+k; j++ {
				b[j] = byte(j % period)
			}
		default: // a copy of something far back
			if i > 0 {
				from := r.IntN(i)
				for j := i; j < i+k; j++ {
					b[j] = b[from+(j-i)%(i-from)]
				}
			}
		}
		i += k
	}
	return b
}

// randomSegments cuts out into segments of random lengths, some empty.
func randomSegments(r *rand.Rand, out []byte) [][]byte {
	var segs [][]byte
	for o := 0; o < len(out); {
		k := min(len(out)-o, r.IntN(6000))
		if r.IntN(4) == 0 {
			k = min(len(out)-o, r.IntN(8))
		}
		segs = append(segs, out[o:o+k])
		o += k
	}
	return segs
}

// TestSnappyScatter: blocks of random and repetitive bytes (every tenth
// all random: literals long enough for ntcopy), encoded by the snappy
// encoder, decode into random cuts of the output (empty and
// one-byte segments, copies across segments) to what
// snappy.DecodeStrict decodes them to. A stream that decodes to another
// length than the segments' is refused; with prefix, one that decodes to
// more is cut where the segments end, and one that decodes to less is
// refused.
func TestSnappyScatter(t *testing.T) {
	r := rand.New(rand.NewPCG(testSeed(t), 1))
	for it := 0; it < 300; it++ {
		n := r.IntN(150000)
		if it < 5 {
			n = it
		}
		raw := scatterData(r, n)
		if it%10 == 9 { // bytes that do not compress: long literals, written to segments of up to 6,000 bytes with ntcopy's non-temporal stores
			for j := range raw {
				raw[j] = byte(r.Uint32())
			}
		}
		enc := snappy.Encode(nil, raw)
		want, err := snappy.DecodeStrict(nil, enc)
		if err != nil || !bytes.Equal(want, raw) {
			t.Fatalf("case %d: the reference does not round-trip: %v", it, err)
		}
		out := make([]byte, n)
		segs := randomSegments(r, out)
		if err := snappyScatter(segs, make([]int, len(segs)), enc, false); err != nil {
			t.Fatalf("case %d (%d bytes, %d segments): %v", it, n, len(segs), err)
		}
		if !bytes.Equal(out, raw) {
			t.Fatalf("case %d (%d bytes, %d segments): decoded bytes differ", it, n, len(segs))
		}
		if n > 0 {
			short := [][]byte{make([]byte, n-1)}
			if err := snappyScatter(short, make([]int, 1), enc, false); err == nil {
				t.Fatalf("case %d: a block of %d bytes decoded into %d", it, n, n-1)
			}
		}
		// A prefix: its first m bytes, as many as the segments hold
		// (cut inside a literal or a copy), and no more.
		m := r.IntN(n + 1)
		pre := make([]byte, m+1)
		pre[m] = 0xA5
		psegs := randomSegments(r, pre[:m])
		if err := snappyScatter(psegs, make([]int, len(psegs)), enc, true); err != nil {
			t.Fatalf("case %d: the first %d of %d bytes (%d segments): %v", it, m, n, len(psegs), err)
		}
		if !bytes.Equal(pre[:m], raw[:m]) || pre[m] != 0xA5 {
			t.Fatalf("case %d: the first %d of %d bytes differ, or a byte past them was written", it, m, n)
		}
		if over := [][]byte{make([]byte, n+1)}; snappyScatter(over, make([]int, 1), enc, true) == nil {
			t.Fatalf("case %d: a prefix of %d bytes of a block of %d decoded", it, n+1, n)
		}
	}
}

// TestSnappyScatterCorrupt: streams with bytes changed, cut short or
// lengthened decode exactly when snappy.DecodeStrict decodes them, to the
// same bytes, and never panic; a prefix of one it decodes is the prefix
// of its bytes.
func TestSnappyScatterCorrupt(t *testing.T) {
	r := rand.New(rand.NewPCG(testSeed(t), 2))
	for it := 0; it < 2000; it++ {
		raw := scatterData(r, r.IntN(5000))
		enc := snappy.Encode(nil, raw)
		switch r.IntN(3) {
		case 0:
			for k := 1 + r.IntN(3); k > 0 && len(enc) > 0; k-- {
				enc[r.IntN(len(enc))] = byte(r.Uint32())
			}
		case 1:
			enc = enc[:r.IntN(len(enc)+1)]
		default:
			enc = append(enc, byte(r.Uint32()), byte(r.Uint32()))
		}
		checkScatterAgainstStrict(t, r, enc)
	}
}

func checkScatterAgainstStrict(t *testing.T, r *rand.Rand, enc []byte) {
	t.Helper()
	want, werr := snappy.DecodeStrict(nil, enc)
	n, lerr := snappy.DecodedLen(enc)
	if lerr != nil || n < 0 || n > 1<<20 {
		n = len(want)
	}
	out := make([]byte, n)
	segs := randomSegments(r, out)
	err := snappyScatter(segs, make([]int, len(segs)), enc, false)
	switch {
	case werr == nil && err != nil:
		t.Fatalf("stream %x: snappy decodes it, snappyScatter: %v", enc, err)
	case werr != nil && err == nil:
		t.Fatalf("stream %x: snappy refuses it (%v), snappyScatter decodes it", enc, werr)
	case err == nil && !bytes.Equal(out, want):
		t.Fatalf("stream %x: decoded bytes differ", enc)
	}
	if werr != nil {
		return
	}
	// A prefix of a stream snappy decodes is its decoded bytes' prefix.
	m := r.IntN(len(want) + 1)
	pre := make([]byte, m)
	psegs := randomSegments(r, pre)
	if err := snappyScatter(psegs, make([]int, len(psegs)), enc, true); err != nil || !bytes.Equal(pre, want[:m]) {
		t.Fatalf("stream %x: its first %d bytes: %v, or they differ", enc, m, err)
	}
}

// FuzzSnappyScatter: any stream decodes exactly when
// snappy.DecodeStrict decodes it, to the same bytes.
func FuzzSnappyScatter(f *testing.F) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 100, 5000} {
		f.Add(snappy.Encode(nil, scatterData(r, n)), uint64(n))
	}
	f.Fuzz(func(t *testing.T, enc []byte, seed uint64) {
		checkScatterAgainstStrict(t, rand.New(rand.NewPCG(seed, 3)), enc)
	})
}

// BenchmarkSnappyScatter decodes 1 MiB blocks of random float32 values
// (what snappy leaves nearly as they are, as a feature column's pages)
// and of repetitive ones (compressed to 0.4): into one buffer
// (snappy.Decode, as a piece's values), into that buffer then copied out
// in 21 KiB parts (a mixture's slices before snappyScatter), and straight
// into the parts (snappyScatter). The destinations cycle through 256 MiB,
// not in cache, as a mixture's slices are not.
func BenchmarkSnappyScatter(b *testing.B) {
	const page, part, ring = 1 << 20, 21 << 10, 256 << 20
	r := rand.New(rand.NewPCG(1, 1))
	dst := make([]byte, ring)
	for i := range dst {
		dst[i] = 1
	}
	at := 0
	next := func() []byte {
		if at+page > ring {
			at = 0
		}
		at += page
		return dst[at-page : at]
	}
	for _, kind := range []string{"random", "repetitive"} {
		var srcs [][]byte
		raw := make([]byte, page)
		for range 64 {
			for j := 0; j < page; j += 4 {
				v := r.Uint32()
				if kind == "repetitive" {
					v = 0x3f800000 | r.Uint32N(64)
				}
				raw[j], raw[j+1], raw[j+2], raw[j+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
			}
			srcs = append(srcs, snappy.Encode(nil, raw))
		}
		scratch := make([]byte, page)
		b.Run(kind+"/whole", func(b *testing.B) {
			b.SetBytes(page)
			for i := 0; b.Loop(); i++ {
				if _, err := snappy.Decode(next(), srcs[i%len(srcs)]); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(kind+"/copied", func(b *testing.B) {
			b.SetBytes(page)
			for i := 0; b.Loop(); i++ {
				if _, err := snappy.Decode(scratch, srcs[i%len(srcs)]); err != nil {
					b.Fatal(err)
				}
				d := next()
				for o := 0; o < page; o += part {
					copy(d[o:min(o+part, page)], scratch[o:min(o+part, page)])
				}
			}
		})
		b.Run(kind+"/scattered", func(b *testing.B) {
			b.SetBytes(page)
			var segs [][]byte
			ends := make([]int, page/part+1)
			for i := 0; b.Loop(); i++ {
				d := next()
				segs = segs[:0]
				for o := 0; o < page; o += part {
					segs = append(segs, d[o:min(o+part, page)])
				}
				if err := snappyScatter(segs, ends, srcs[i%len(srcs)], false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
