package format

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/pierrec/lz4/v4"
)

// TestLZ4Hadoop: Hadoop frames (one or several per page), a raw LZ4 block
// under the LZ4 codec, and corrupt input (an error, no panic).
func TestLZ4Hadoop(t *testing.T) {
	src := bytes.Repeat([]byte("meshfeed lz4 hadoop framing "), 200)
	var c lz4Hadoop
	one := c.Encode(nil, src)
	two := append(c.Encode(nil, src[:1000]), c.Encode(nil, src[1000:])...)
	raw := make([]byte, lz4.CompressBlockBound(len(src)))
	n, err := lz4.CompressBlock(src, raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, in := range map[string][]byte{"one frame": one, "two frames": two, "raw block": raw[:n]} {
		got, err := c.DecodeWithError(make([]byte, len(src)), in)
		if err != nil || !bytes.Equal(got, src) {
			t.Errorf("%s: decoded %d bytes (err %v), want the %d source bytes", name, len(got), err, len(src))
		}
	}
	bad := append([]byte(nil), one...)
	binary.BigEndian.PutUint32(bad[4:], uint32(len(bad))) // compressed length past the end
	for i := 8; i < len(bad); i++ {
		bad[i] ^= 0x5a
	}
	if _, err := c.DecodeWithError(make([]byte, len(src)), bad); err == nil {
		t.Error("corrupt input decoded without an error")
	}
}
