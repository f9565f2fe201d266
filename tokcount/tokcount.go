package tokcount

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// FactKind is the kind of the manifest per-file fact that stores a file's
// Counts (manifest.Manifest.PutFact), keyed by Key.String().
const FactKind = "token-count/v1"

// ErrCorrupt is the error of Decode for bytes that are not an encoding of
// Counts.
var ErrCorrupt = errors.New("tokcount: corrupt token counts")

// Key says which counts: the tokenizer (the SHA-256 of its tokenizer.json,
// hex), the column and whether the post-processor's special tokens are added.
type Key struct {
	Tokenizer  string
	Column     string
	AddSpecial bool
}

// String is the canonical form of k, the key of its fact and cache entries:
// JSON with the fields in this order.
func (k Key) String() string {
	b, _ := json.Marshal(struct {
		Tokenizer  string `json:"tokenizer_sha256"`
		Column     string `json:"column"`
		AddSpecial bool   `json:"add_special_tokens"`
	}{k.Tokenizer, k.Column, k.AddSpecial})
	return string(b)
}

// Counts is the token count of every row of one file, per row group in file
// order.
type Counts struct {
	RowGroups [][]int32
}

// Bytes estimates the memory c holds.
func (c *Counts) Bytes() int64 {
	n := int64(64 + 24*len(c.RowGroups))
	for _, rg := range c.RowGroups {
		n += 4 * int64(len(rg))
	}
	return n
}

// Tokens returns the tokens of every row together.
func (c *Counts) Tokens() int64 {
	var t int64
	for _, rg := range c.RowGroups {
		for _, k := range rg {
			t += int64(k)
		}
	}
	return t
}

// Encode returns c as bytes: the row groups, then per row group its rows and
// each row's count, all unsigned varints (about one or two bytes a row).
func Encode(c *Counts) []byte {
	out := binary.AppendUvarint(nil, uint64(len(c.RowGroups)))
	for _, rg := range c.RowGroups {
		out = binary.AppendUvarint(out, uint64(len(rg)))
		for _, k := range rg {
			out = binary.AppendUvarint(out, uint64(k))
		}
	}
	return out
}

// Decode is the inverse of Encode. Bytes that do not decode exactly (short,
// trailing bytes, a count past int32) are ErrCorrupt.
func Decode(b []byte) (*Counts, error) {
	next := func() (uint64, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, fmt.Errorf("%w: truncated", ErrCorrupt)
		}
		b = b[n:]
		return v, nil
	}
	nrg, err := next()
	if err != nil {
		return nil, err
	}
	if nrg > uint64(len(b)) {
		return nil, fmt.Errorf("%w: %d row groups in %d bytes", ErrCorrupt, nrg, len(b))
	}
	c := &Counts{RowGroups: make([][]int32, nrg)}
	for i := range c.RowGroups {
		rows, err := next()
		if err != nil {
			return nil, err
		}
		if rows > uint64(len(b)) {
			return nil, fmt.Errorf("%w: row group %d: %d rows in %d bytes", ErrCorrupt, i, rows, len(b))
		}
		rg := make([]int32, rows)
		for j := range rg {
			v, err := next()
			if err != nil {
				return nil, err
			}
			if v > math.MaxInt32 {
				return nil, fmt.Errorf("%w: row group %d row %d: count %d", ErrCorrupt, i, j, v)
			}
			rg[j] = int32(v)
		}
		c.RowGroups[i] = rg
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the counts", ErrCorrupt, len(b))
	}
	return c, nil
}
