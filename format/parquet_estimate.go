package format

// The decoded size of a column chunk, estimated from the footer alone: what
// read-ahead budgets charge for a row group before it is fetched
// (RowGroupMeta.DecodedBytes). A chunk's uncompressed size counts encoded
// pages, and dictionary encoding makes those far smaller than the Arrow
// arrays they decode to: a low-cardinality string column of 100-byte values
// stores one small index per row and decodes to 100 bytes per row.

import (
	"bytes"
	"math"
	"math/bits"

	"github.com/apache/arrow-go/v18/arrow"
	pqformat "github.com/parquet-go/parquet-go/format"
)

// decodedChunkBytes estimates the bytes of the Arrow buffers (values,
// offsets, validity) that column chunk cm of leaf e decodes to. It is never below the chunk's
// uncompressed size. Fixed-width values are bounded exactly by the value
// count (nulls and empty lists included). Byte arrays:
//
//   - with size statistics (unencoded_byte_array_data_bytes, Parquet 2.10):
//     those bytes, exactly;
//   - dictionary-encoded: every non-null value counted at the longest of
//     the chunk's min and max statistics and a bound of the dictionary's
//     mean entry (dictionaryMean): at least the decoded size when values
//     are used about evenly or are of about one length (ids, hashes,
//     categories); an undercount only where the rows use a dictionary's
//     longest entries far more often than its short ones. Capped at 2 GiB,
//     which one row group's string column may not exceed;
//   - plain or delta encoded: the uncompressed pages, which hold every
//     value's bytes.
func decodedChunkBytes(cm *pqformat.ColumnMetaData, e leafEstimate) int64 {
	typeLength, repeated, levelBits := e.typeLength, e.repeated, e.levelBits
	base := cm.TotalUncompressedSize
	n := max(cm.NumValues, 0)
	validity := 2*((n+7)/8) + 64 // a bitmap, as builders grow it (doubling)
	var offsets int64
	if repeated {
		offsets = 4 * (n + 1)
	}
	var values int64
	switch cm.Type {
	case pqformat.Boolean:
		values = (n + 7) / 8
	case pqformat.Int32, pqformat.Float:
		values = 4 * n
	case pqformat.Int64, pqformat.Double:
		values = 8 * n
	case pqformat.Int96:
		values = 12 * n
	case pqformat.FixedLenByteArray:
		values = int64(max(typeLength, 0)) * n
	case pqformat.ByteArray:
		offsets += 4 * (n + 1)
		values = byteArrayBytes(cm, n, levelBits)
	}
	if e.width > 0 && cm.Type != pqformat.ByteArray {
		values = int64(e.width) * n // decimals stored narrower than decimal128/256
	}
	return max(base, values+offsets+validity)
}

// byteArrayBytes estimates the value bytes of a BYTE_ARRAY chunk of n values
// (decodedChunkBytes says how); levelBits is the bits per value of the
// chunk's repetition and definition levels.
func byteArrayBytes(cm *pqformat.ColumnMetaData, n int64, levelBits int) int64 {
	if b := cm.SizeStatistics.UnencodedByteArrayDataBytes; b > 0 {
		return b
	}
	if !dictionaryEncoded(cm) || n == 0 {
		return cm.TotalUncompressedSize
	}
	st := &cm.Statistics
	longest := int64(max(len(st.MinValue), len(st.MaxValue), len(st.Min), len(st.Max)))
	nonNull := n - min(max(st.NullCount, 0), n)
	// Two different extremes: the dictionary has at least two entries.
	atLeast := int64(1)
	if lo, hi := statMin(st), statMax(st); lo != nil && hi != nil && !bytes.Equal(lo, hi) {
		atLeast = 2
	}
	mean := dictionaryMean(cm, n, levelBits, atLeast)
	if nonNull > 0 && max(longest, mean) > math.MaxInt32/nonNull {
		return math.MaxInt32
	}
	return nonNull * max(longest, mean)
}

// dictionaryMean bounds from above the mean length of a dictionary entry of a
// dictionary-encoded chunk of n values: the dictionary page's bytes (the
// chunk's uncompressed size less its stored data pages) over a lower bound of
// its entry count. The data pages hold one index of b bits per value, b the
// bits a dictionary of that many entries needs; b is estimated from the
// stored data bytes per value less the levels' bits and one bit of margin
// (headers, runs), and a dictionary that needs b bits has more than 2^(b-1)
// entries; it has at least atLeast (2 when the statistics' min and max
// differ). Runs of one index make the data pages smaller, which makes the
// bound larger, never smaller.
func dictionaryMean(cm *pqformat.ColumnMetaData, n int64, levelBits int, atLeast int64) int64 {
	dictStored := cm.TotalCompressedSize
	if cm.DictionaryPageOffset > 0 && cm.DataPageOffset > cm.DictionaryPageOffset {
		dictStored = min(dictStored, cm.DataPageOffset-cm.DictionaryPageOffset)
	}
	dataStored := max(cm.TotalCompressedSize-dictStored, 0)
	dict := max(cm.TotalUncompressedSize-dataStored, dictStored, 0)
	bits := dataStored*8/n - int64(levelBits) - 1
	entries := max(atLeast, 1)
	if bits > 1 {
		entries = max(entries, int64(1)<<min(bits-1, 40)+1)
	}
	return max(dict/entries-4, 0)
}

// dictionaryEncoded reports whether some data page of the chunk may be
// dictionary-encoded.
func dictionaryEncoded(cm *pqformat.ColumnMetaData) bool {
	if cm.DictionaryPageOffset > 0 {
		return true
	}
	for _, e := range cm.Encoding {
		if e == pqformat.RLEDictionary || e == pqformat.PlainDictionary {
			return true
		}
	}
	return false
}

// leafEstimate is what decodedChunkBytes needs of a leaf column's schema.
type leafEstimate struct {
	typeLength int  // FIXED_LEN_BYTE_ARRAY width
	repeated   bool // inside a list (offsets per value)
	levelBits  int  // bits per value of its repetition and definition levels
	width      int  // bytes per decoded value where wider than stored (decimals), else 0
}

// leafEstimate describes leaf column leaf of top-level field t.
func (p *parquetFooter) leafEstimate(leaf int, t arrow.DataType) leafEstimate {
	if lt, ok := t.(arrow.ListLikeType); ok {
		t = lt.Elem()
	}
	width := 0
	switch t.ID() {
	case arrow.DECIMAL128:
		width = 16
	case arrow.DECIMAL256:
		width = 32
	}
	cols := p.pf.Schema().Columns()
	if leaf >= len(cols) {
		return leafEstimate{width: width}
	}
	l, ok := p.pf.Schema().Lookup(cols[leaf]...)
	if !ok {
		return leafEstimate{width: width}
	}
	_, length, _ := leafKind(l.Node)
	return leafEstimate{
		width:      width,
		typeLength: length,
		repeated:   l.MaxRepetitionLevel > 0,
		levelBits:  bits.Len(uint(l.MaxRepetitionLevel)) + bits.Len(uint(l.MaxDefinitionLevel)),
	}
}

// statMin and statMax are a chunk's minimum and maximum statistics (the
// current fields, else the deprecated ones), nil when absent.
func statMin(st *pqformat.Statistics) []byte {
	if st.MinValue != nil {
		return st.MinValue
	}
	return st.Min
}

func statMax(st *pqformat.Statistics) []byte {
	if st.MaxValue != nil {
		return st.MaxValue
	}
	return st.Max
}
