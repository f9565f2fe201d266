package ntcopy

import "unsafe"

const available = true

// head returns the bytes from dst's start to its first 64-byte boundary.
func head(dst []byte) int {
	return int(-uintptr(unsafe.Pointer(unsafe.SliceData(dst)))) & 63
}

// lines copies src to dst, both of the same length, a multiple of 64, dst
// 64-byte aligned, with non-temporal stores, then fences.
func lines(dst, src []byte) {
	if len(dst) > 0 {
		copyLines(unsafe.SliceData(dst), unsafe.SliceData(src), len(dst))
	}
}

//go:noescape
func copyLines(dst, src *byte, n int)
