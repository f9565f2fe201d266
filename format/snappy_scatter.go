package format

import (
	"encoding/binary"
	"errors"

	"github.com/meshfeed/meshfeed/internal/ntcopy"
)

// Snappy's block format (the codec Parquet calls SNAPPY) decoded into an
// output that is a run of separate buffers, for pieces whose values go
// straight into the slices that take them (place.go). The klauspost
// decoder writes one contiguous buffer; decoding into one and copying
// its parts out writes every byte twice, which costs as much again as
// the decode (BenchmarkSnappyScatter). No library decodes into parts.

// errSnappyScatter is a stream snappyScatter refuses: corrupt, or not
// strict snappy (S2's extensions). The caller decodes the page the usual
// way, which reports what is wrong with it.
var errSnappyScatter = errors.New("format: not a snappy block this decoder takes")

// scatterOut is an output made of consecutive buffers: byte o of the
// output is in segs[i] for the i with ends[i-1] <= o < ends[i].
type scatterOut struct {
	segs [][]byte
	ends []int
}

func (s *scatterOut) start(i int) int {
	if i == 0 {
		return 0
	}
	return s.ends[i-1]
}

// snappyScatter decodes src, a snappy block, into segs (what it decodes
// to must fill them exactly; with prefix, it may go on past them, and
// only its first bytes, as many as segs hold, are decoded); ends is
// scratch of len(segs). segs[0] is written with ordinary stores, the
// others' long literals with non-temporal ones (put). On error the
// segments hold unspecified bytes.
func snappyScatter(segs [][]byte, ends []int, src []byte, prefix bool) error {
	s := scatterOut{segs: segs, ends: ends[:len(segs)]}
	total := 0
	for i, b := range segs {
		total += len(b)
		s.ends[i] = total
	}
	dlen, n := binary.Uvarint(src)
	if n <= 0 || dlen < uint64(total) || dlen > uint64(total) && !prefix {
		return errSnappyScatter
	}
	src = src[n:]
	o, cur := 0, 0 // output written; the segment holding o
	for len(src) > 0 && !(prefix && o == total) {
		literal, length, offset, k := snappyTag(src)
		if k == 0 || length > total-o && !prefix {
			return errSnappyScatter
		}
		length = min(length, total-o) // the part of a prefix's last element it holds
		src = src[k:]
		if literal {
			if length > len(src) {
				return errSnappyScatter
			}
			cur = s.put(o, cur, src[:length])
			o += length
			src = src[length:]
			continue
		}
		if offset <= 0 || offset > o {
			return errSnappyScatter
		}
		cur = s.copyBack(o, cur, offset, length)
		o += length
	}
	if o != total {
		return errSnappyScatter
	}
	return nil
}

// snappyTag reads the element that src starts with: a literal of length
// bytes (which follow the k bytes read), or a copy of length bytes from
// offset back; k is 0 where src ends inside it.
func snappyTag(src []byte) (literal bool, length, offset, k int) {
	tag := src[0]
	switch tag & 3 {
	case 0:
		x, k := int(tag>>2), 1
		if x >= 60 {
			k += x - 59 // bytes of the length
			if len(src) < k {
				return false, 0, 0, 0
			}
			x = 0
			for j := k - 1; j >= 1; j-- {
				x = x<<8 | int(src[j])
			}
		}
		return true, x + 1, 0, k
	case 1:
		if len(src) < 2 {
			return false, 0, 0, 0
		}
		return false, 4 + int(tag>>2)&7, int(tag&0xe0)<<3 | int(src[1]), 2
	case 2:
		if len(src) < 3 {
			return false, 0, 0, 0
		}
		return false, 1 + int(tag>>2), int(binary.LittleEndian.Uint16(src[1:])), 3
	default:
		if len(src) < 5 {
			return false, 0, 0, 0
		}
		return false, 1 + int(tag>>2), int(binary.LittleEndian.Uint32(src[1:])), 5
	}
}

// put writes lit at output offset o (cur: a segment at or before the one
// holding o) and returns the segment holding its last byte. Past the
// first (scatterPage's levels, which it reads back), the segments are a
// piece's runs in the slices of the steps that take them, which the
// transport or the client reads from another core: a long run goes with
// non-temporal stores (ntcopy), which take 30% less time a byte there
// than the runtime's memmove, whose stores read each line first in runs
// shorter than 1 MiB (a page whose values barely compress is one literal,
// which the single dataset's decoder writes in one such memmove).
func (s *scatterOut) put(o, cur int, lit []byte) int {
	for len(lit) > 0 {
		for s.ends[cur] <= o {
			cur++
		}
		var k int
		if dst := s.segs[cur][o-s.start(cur):]; cur == 0 {
			k = copy(dst, lit)
		} else {
			k = ntcopy.Copy(dst, lit)
		}
		lit, o = lit[k:], o+k
	}
	return cur
}

// copyBack copies length bytes from offset back to output offset o (cur
// as for put; 0 < offset <= o, o+length within the output), as snappy
// copies: byte after byte, so that an offset shorter than the length
// repeats the bytes.
func (s *scatterOut) copyBack(o, cur, offset, length int) int {
	for s.ends[cur] <= o {
		cur++
	}
	if base := s.start(cur); o-offset >= base && o+length <= s.ends[cur] {
		// Within one segment (nearly every copy).
		b := s.segs[cur]
		d, from := o-base, o-base-offset
		if offset >= length {
			copy(b[d:d+length], b[from:from+length])
			return cur
		}
		// The bytes repeat every offset: copy what is final, doubling.
		for done := 0; done < length; {
			k := min(length-done, d+done-from)
			copy(b[d+done:d+done+k], b[from:from+k])
			done += k
		}
		return cur
	}
	// Across segments: runs within one source and one destination segment,
	// each at most offset long (it reads no byte it writes).
	si := cur
	for si > 0 && o-offset < s.ends[si-1] {
		si--
	}
	for length > 0 {
		from := o - offset
		for s.ends[si] <= from {
			si++
		}
		for s.ends[cur] <= o {
			cur++
		}
		k := min(length, offset, s.ends[si]-from, s.ends[cur]-o)
		fs := from - s.start(si)
		copy(s.segs[cur][o-s.start(cur):], s.segs[si][fs:fs+k])
		o, length = o+k, length-k
	}
	return cur
}
