package format

// Bloom filters for filters: a column chunk's split-block bloom filter says
// of a value that the chunk may hold it, or surely does not, so that == and
// in on a value no row group holds rule row groups out where their bounds
// and dictionaries cannot (high-cardinality columns written without a
// dictionary).

import (
	"context"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/metadata"
)

// Bloom answers whether a column chunk may hold a value, given as the Go
// value of its Arrow type: a string (strings, binaries), an int64 (signed
// ints) or anything else (always true: not checked).
type Bloom interface {
	MayContain(v any) bool
}

// BloomFooter is a Footer that reads a column chunk's bloom filter
// (Parquet's).
type BloomFooter interface {
	// ColumnBloom returns the bloom filter of top-level column name in row
	// group rg, read from src (the file the footer was read from), for
	// values of type out; nil when the chunk has none. An error is a read
	// or a corrupt filter.
	ColumnBloom(ctx context.Context, src Source, rg int, name string, out arrow.DataType) (Bloom, error)
}

var _ BloomFooter = (*parquetFooter)(nil)

var bloomBuffers = sync.Pool{New: func() any { return memory.NewResizableBuffer(memory.DefaultAllocator) }}

// ColumnBloom implements BloomFooter.
func (p *parquetFooter) ColumnBloom(ctx context.Context, src Source, rg int, name string, out arrow.DataType) (Bloom, error) {
	leaves := p.leaves[name]
	rgs := p.pf.Metadata().RowGroups
	if len(leaves) != 1 || rg < 0 || rg >= len(rgs) || leaves[0] >= len(rgs[rg].Columns) || rgs[rg].Columns[leaves[0]].MetaData.BloomFilterOffset <= 0 {
		return nil, nil
	}
	if d, ok := out.(*arrow.DictionaryType); ok {
		out = d.ValueType
	}
	switch out.ID() {
	case arrow.STRING, arrow.LARGE_STRING, arrow.BINARY, arrow.LARGE_BINARY, arrow.INT32, arrow.INT64:
	default:
		return nil, nil
	}
	md, err := p.arrowMD()
	if err != nil {
		return nil, nil
	}
	r := metadata.BloomFilterReader{Input: &readerAtSeeker{ReaderAt: &sourceReaderAt{ctx: ctx, src: src}, size: src.Size()},
		FileMetadata: md, BufferPool: &bloomBuffers}
	rgr, err := r.RowGroup(rg)
	if err != nil {
		return nil, err
	}
	bf, err := rgr.GetColumnBloomFilter(leaves[0])
	if err != nil || bf == nil {
		return nil, err
	}
	return typedBloom{bf: bf, t: out.ID()}, nil
}

// typedBloom checks values of one Arrow type against a chunk's filter, in
// the chunk's physical type (byte arrays, INT32, INT64).
type typedBloom struct {
	bf metadata.BloomFilter
	t  arrow.Type
}

func (b typedBloom) MayContain(v any) bool {
	switch x := v.(type) {
	case string:
		return b.bf.CheckHash(metadata.GetHash(b.bf.Hasher(), pq.ByteArray(x)))
	case int64:
		if b.t == arrow.INT32 {
			return b.bf.CheckHash(metadata.GetHash(b.bf.Hasher(), int32(x)))
		}
		if b.t == arrow.INT64 {
			return b.bf.CheckHash(metadata.GetHash(b.bf.Hasher(), x))
		}
	}
	return true
}
