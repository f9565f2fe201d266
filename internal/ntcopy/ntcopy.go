package ntcopy

// Min is the least length Copy writes with non-temporal stores: the
// shorter the copy, the larger the share of the lines its ends cut (stored
// the ordinary way) and of the fence. Runs into lines not in cache
// (BenchmarkShortRunsScattered) lose below 1 KiB (256 bytes: 1.2 against
// 3.4 GB/s with copy) and gain from 2 KiB (6.9 against 5.5); the runs
// callers write are under 1 KiB or over 20 KiB, so 1-4 KiB is left as it
// was.
const Min = 4096

// Copy copies min(len(dst), len(src)) bytes from src to dst, which must
// not overlap, and returns their count: the bulk with non-temporal stores
// where the platform has them and the length is at least Min.
func Copy(dst, src []byte) int {
	n := min(len(dst), len(src))
	if n < Min || !available {
		return copy(dst, src)
	}
	h := head(dst)
	copy(dst[:h], src[:h])
	body := (n - h) &^ 63
	lines(dst[h:h+body], src[h:h+body])
	copy(dst[h+body:n], src[h+body:n])
	return n
}
