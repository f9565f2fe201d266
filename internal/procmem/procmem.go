// Package procmem answers one question for tests and benchmarks: how many
// bytes of a file does this process hold in its page tables? (Linux's
// /proc/self/smaps, summed over every mapping of the file.)
//
// It imports nothing of meshfeed.
package procmem

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// FileRSS returns the bytes of the file at path resident in this process's
// page tables: the Rss of every mapping of it in /proc/self/smaps. An error
// where there is no /proc (not Linux).
func FileRSS(path string) (int64, error) {
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, fmt.Errorf("procmem: %w", err)
	}
	var rss int64
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if !strings.HasSuffix(f[0], ":") { // a mapping's header: range perms offset dev inode [path]
			in = len(f) >= 6 && f[len(f)-1] == path
			continue
		}
		if in && f[0] == "Rss:" && len(f) >= 2 {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("procmem: smaps %q: %w", line, err)
			}
			rss += kb << 10
		}
	}
	return rss, nil
}
