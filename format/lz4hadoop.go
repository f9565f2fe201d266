package format

// The deprecated Parquet LZ4 codec: what parquet-mr (Spark, Hive) and older
// Arrow C++ wrote under codec LZ4 is the Hadoop framing (blocks, each an
// 8-byte big-endian header of decompressed and compressed length, then a raw
// LZ4 block); some writers put one raw LZ4 block there instead. arrow-go has
// no codec for it; pyarrow reads both, and so does meshfeed's arrow-go
// fallback with this one (registered for LZ4 when arrow-go has none).

import (
	"encoding/binary"
	"errors"

	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/pierrec/lz4/v4"
)

func init() {
	if _, err := compress.GetCodec(compress.Codecs.Lz4); err != nil {
		compress.RegisterCodec(compress.Codecs.Lz4, lz4Hadoop{})
	}
}

type lz4Hadoop struct{}

var errLZ4Hadoop = errors.New("LZ4 (Hadoop framing): corrupt block")

// DecodeWithError decompresses src into dst (sized to the page's
// uncompressed length): Hadoop framing first, a raw LZ4 block if that fails.
func (lz4Hadoop) DecodeWithError(dst, src []byte) ([]byte, error) {
	if out, ok := decodeHadoopFrames(dst, src); ok {
		return out, nil
	}
	n, err := lz4.UncompressBlock(src, dst)
	if err != nil {
		return nil, errors.Join(errLZ4Hadoop, err)
	}
	return dst[:n], nil
}

func decodeHadoopFrames(dst, src []byte) ([]byte, bool) {
	out := 0
	for len(src) > 0 {
		if len(src) < 8 {
			return nil, false
		}
		raw := int(binary.BigEndian.Uint32(src))
		comp := int(binary.BigEndian.Uint32(src[4:]))
		src = src[8:]
		if comp > len(src) || raw > len(dst)-out || raw < 0 || comp < 0 {
			return nil, false
		}
		n, err := lz4.UncompressBlock(src[:comp], dst[out:out+raw])
		if err != nil || n != raw {
			return nil, false
		}
		out += n
		src = src[comp:]
	}
	return dst[:out], true
}

func (c lz4Hadoop) Decode(dst, src []byte) []byte {
	out, err := c.DecodeWithError(dst, src)
	if err != nil {
		panic(err)
	}
	return out
}

// Encode writes one Hadoop frame (meshfeed writes no LZ4 files; this is for
// tests and completeness of the interface).
func (c lz4Hadoop) Encode(dst, src []byte) []byte {
	bound := int(c.CompressBound(int64(len(src))))
	if cap(dst) < bound {
		dst = make([]byte, bound)
	}
	dst = dst[:bound]
	var comp lz4.Compressor
	n, err := comp.CompressBlock(src, dst[8:])
	if err != nil {
		panic(err)
	}
	binary.BigEndian.PutUint32(dst, uint32(len(src)))
	binary.BigEndian.PutUint32(dst[4:], uint32(n))
	return dst[:8+n]
}

func (c lz4Hadoop) EncodeLevel(dst, src []byte, _ int) []byte { return c.Encode(dst, src) }

func (lz4Hadoop) CompressBound(n int64) int64 { return int64(lz4.CompressBlockBound(int(n))) + 8 }
