package tokenize

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/meshfeed/meshfeed/internal/datagen"
)

// BenchmarkEncode encodes a text corpus with the tokenizer.json named by
// $MESHFEED_TOKENIZER; documents come from datagen's text generator over the
// tree $MESHFEED_TEXT_SOURCE (for example Python's standard library). The
// side-by-side comparison with the reference libraries is
// benchmarks/tokenize_sidebyside.py.
func BenchmarkEncode(b *testing.B) {
	path, src := os.Getenv("MESHFEED_TOKENIZER"), os.Getenv("MESHFEED_TEXT_SOURCE")
	if path == "" || src == "" {
		b.Skip("set MESHFEED_TOKENIZER (a tokenizer.json) and MESHFEED_TEXT_SOURCE (a directory of text)")
	}
	tok, err := Load(path)
	if err != nil {
		b.Fatal(err)
	}
	ts, err := datagen.LoadTextSource(src)
	if err != nil {
		b.Fatal(err)
	}
	spec := datagen.DefaultTextSpec()
	docs := make([]string, 500)
	var bytes int64
	for i := range docs {
		docs[i] = ts.TextDoc(spec, int64(i))
		bytes += int64(len(docs[i]))
	}
	for _, workers := range []int{1, 2} {
		b.Run(map[int]string{1: "workers=1", 2: "workers=2"}[workers], func(b *testing.B) {
			b.SetBytes(bytes)
			b.ReportAllocs()
			var values []int32
			var offsets []int64
			cpu := cpuTime()
			for b.Loop() {
				values, offsets, err = tok.EncodeBatch(values[:0], offsets[:0], len(docs), workers, true, func(i int) string { return docs[i] })
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
	// Cold: a fresh Tokenizer each time (its word cache empty), as a short
	// run starts. merged/op is the words the BPE merged (cache misses):
	// with the cache shared by the workers, about the same for 1 and 2.
	for _, workers := range []int{1, 2} {
		b.Run(map[int]string{1: "cold/workers=1", 2: "cold/workers=2"}[workers], func(b *testing.B) {
			b.SetBytes(bytes)
			merged := 0
			var cpu time.Duration
			for b.Loop() {
				b.StopTimer()
				fresh, err := Load(path)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				c := cpuTime()
				if _, _, err := fresh.EncodeBatch(nil, nil, len(docs), workers, true, func(i int) string { return docs[i] }); err != nil {
					b.Fatal(err)
				}
				cpu += cpuTime() - c
				merged += fresh.mergedWords()
			}
			b.ReportMetric(float64(merged)/float64(b.N), "merged/op")
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the process's user and system CPU time so far: on a loaded
// machine it moves far less than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
