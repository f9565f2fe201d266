package format

// Decompressing the fast path's pages straight into their Arrow buffers.

import (
	"bytes"
	"fmt"
	"io"
	"sync"
	"unsafe"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go"
	pqformat "github.com/parquet-go/parquet-go/format"
)

// zstdDecoder decodes every fast-path ZSTD page (DecodeAll is safe for
// concurrent use). The cap limit makes a frame that claims more than the
// page's uncompressed size an error instead of an allocation of that size.
var zstdDecoder = sync.OnceValues(func() (*zstd.Decoder, error) {
	return zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecodeAllCapLimit(true))
})

// gzipReaders are reset onto each page.
var gzipReaders sync.Pool

// gunzipInto decodes a gzip stream that must hold exactly len(out) bytes.
func gunzipInto(out, src []byte) error {
	br := bytes.NewReader(src)
	z, _ := gzipReaders.Get().(*gzip.Reader)
	var err error
	if z == nil {
		z, err = gzip.NewReader(br)
	} else {
		err = z.Reset(br)
	}
	if err != nil {
		return fmt.Errorf("GZIP: %w: %w", err, ErrCorrupt)
	}
	defer gzipReaders.Put(z)
	if _, err := io.ReadFull(z, out); err != nil {
		return fmt.Errorf("GZIP data shorter than %d bytes: %w: %w", len(out), err, ErrCorrupt)
	}
	var one [1]byte
	if n, err := z.Read(one[:]); n != 0 || err != io.EOF {
		return fmt.Errorf("GZIP data longer than %d bytes, or a corrupt end (%v): %w", len(out), err, ErrCorrupt)
	}
	return nil
}

// decompressInto decodes src into out, which must be exactly the decoded
// size. Every codec of fastCodec decodes into out; another (not reached)
// would go through parquet-go's codec and a copy.
func decompressInto(codec pqformat.CompressionCodec, out, src []byte) error {
	out = out[:len(out):len(out)]
	var got []byte
	var err error
	switch codec {
	case pqformat.Snappy:
		// Check the stated length first: Decode allocates it when out is
		// smaller.
		var n int
		if n, err = snappy.DecodedLen(src); err == nil && n != len(out) {
			return fmt.Errorf("%s data decodes to %d bytes, want %d: %w", codec, n, len(out), ErrCorrupt)
		}
		if err == nil {
			got, err = snappy.Decode(out, src)
		}
	case pqformat.Zstd:
		var d *zstd.Decoder
		if d, err = zstdDecoder(); err == nil {
			got, err = d.DecodeAll(src, out[:0])
		}
	case pqformat.Gzip:
		return gunzipInto(out, src)
	default:
		got, err = parquet.LookupCompressionCodec(codec).Decode(out, src)
	}
	if err != nil {
		return fmt.Errorf("%s: %w: %w", codec, err, ErrCorrupt)
	}
	if len(got) != len(out) {
		return fmt.Errorf("%s data decodes to %d bytes, want %d: %w", codec, len(got), len(out), ErrCorrupt)
	}
	if len(got) > 0 && unsafe.SliceData(got) != unsafe.SliceData(out) {
		copy(out, got)
	}
	return nil
}
