package feed

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/tokenize"
)

// BenchmarkTokenizeStrings: a row group's text (textSource documents of up
// to 2,000 characters) encoded on one goroutine, as ids alone
// (EncodeStrings into reused slices) and as the list<int32> array the
// stream's readers make (TokenizeStrings: the same plus one copy of the ids
// into Arrow buffers of their exact size). The difference is that copy's
// cost. bytes: the text's.
func BenchmarkTokenizeStrings(b *testing.B) {
	tk, err := tokenize.Parse("t", testTokenizerJSON(0))
	if err != nil {
		b.Fatal(err)
	}
	spec := datagen.TextSpec{Docs: 2000, Files: 1, RowGroupRows: 2000, MinChars: 10, MaxChars: 2000, Seed: 1}
	src := textSource()
	sb := array.NewStringBuilder(memory.DefaultAllocator)
	var n int64
	for id := range spec.Docs {
		d := src.TextDoc(spec, id)
		n += int64(len(d))
		sb.Append(d)
	}
	arr := sb.NewArray()
	defer arr.Release()
	b.Run("ids", func(b *testing.B) {
		b.SetBytes(n)
		b.ReportAllocs()
		var ids []int32
		var ends []int64
		for b.Loop() {
			if ids, ends, err = EncodeStrings(tk, arr, true, 1, ids[:0], ends[:0]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("arrow", func(b *testing.B) {
		b.SetBytes(n)
		b.ReportAllocs()
		for b.Loop() {
			out, err := TokenizeStrings(tk, arr, true, 1, memory.DefaultAllocator)
			if err != nil {
				b.Fatal(err)
			}
			out.Release()
		}
	})
}
