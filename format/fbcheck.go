package format

import (
	"fmt"

	flatbuffers "github.com/google/flatbuffers/go"
)

// Arrow readers size slices by the vector lengths found in IPC flatbuffers,
// so a corrupt length can make them allocate terabytes (an out-of-memory
// crash, not a recoverable panic). checkSchemaFB walks every vector that
// arrow-go's schema decoding allocates from (fields, children, custom
// metadata, features, union type ids) and checks that it fits in the buffer.

const (
	fbMessageHeaderSchema = 1
	fbTypeUnion           = 14
)

// fbVector returns the start and length of the vector in slot of t, checking
// that length*elem bytes lie inside the buffer. ok is false when absent.
func fbVector(t *flatbuffers.Table, slot int, elem int) (start flatbuffers.UOffsetT, n int, ok bool, err error) {
	o := flatbuffers.UOffsetT(t.Offset(flatbuffers.VOffsetT(4 + 2*slot)))
	if o == 0 {
		return 0, 0, false, nil
	}
	if int(t.Pos+o)+4 > len(t.Bytes) {
		return 0, 0, false, fmt.Errorf("vector offset out of range")
	}
	start = t.Vector(o)
	n = t.VectorLen(o)
	if n < 0 || int(start) > len(t.Bytes) || n > (len(t.Bytes)-int(start))/elem {
		return 0, 0, false, fmt.Errorf("vector of %d elements of %d bytes does not fit in %d bytes", n, elem, len(t.Bytes))
	}
	return start, n, true, nil
}

func fbTableAt(buf []byte, at flatbuffers.UOffsetT) (flatbuffers.Table, error) {
	if int(at)+4 > len(buf) {
		return flatbuffers.Table{}, fmt.Errorf("table offset out of range")
	}
	pos := at + flatbuffers.GetUOffsetT(buf[at:])
	if int(pos)+4 > len(buf) {
		return flatbuffers.Table{}, fmt.Errorf("table out of range")
	}
	return flatbuffers.Table{Bytes: buf, Pos: pos}, nil
}

func fbCheckKeyValues(t *flatbuffers.Table, slot int) error {
	_, _, _, err := fbVector(t, slot, 4)
	return err
}

func fbCheckField(t *flatbuffers.Table, depth int) error {
	if depth > 64 {
		return fmt.Errorf("fields nested deeper than 64")
	}
	if err := fbCheckKeyValues(t, 6); err != nil {
		return err
	}
	if tt := t.Offset(4 + 2*2); tt != 0 && t.GetByte(flatbuffers.UOffsetT(tt)+t.Pos) == fbTypeUnion {
		if o := flatbuffers.UOffsetT(t.Offset(4 + 2*3)); o != 0 {
			var u flatbuffers.Table
			t.Union(&u, o)
			if _, _, _, err := fbVector(&u, 1, 4); err != nil {
				return err
			}
		}
	}
	start, n, ok, err := fbVector(t, 5, 4)
	if err != nil || !ok {
		return err
	}
	for i := 0; i < n; i++ {
		c, err := fbTableAt(t.Bytes, start+flatbuffers.UOffsetT(4*i))
		if err != nil {
			return err
		}
		if err := fbCheckField(&c, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// fbCheckSchemaTable checks an Arrow Schema table.
func fbCheckSchemaTable(s *flatbuffers.Table) error {
	if err := fbCheckKeyValues(s, 2); err != nil {
		return err
	}
	if _, _, _, err := fbVector(s, 3, 8); err != nil {
		return err
	}
	start, n, ok, err := fbVector(s, 1, 4)
	if err != nil || !ok {
		return err
	}
	for i := 0; i < n; i++ {
		f, err := fbTableAt(s.Bytes, start+flatbuffers.UOffsetT(4*i))
		if err != nil {
			return err
		}
		if err := fbCheckField(&f, 0); err != nil {
			return err
		}
	}
	return nil
}

// checkSchemaMessage checks an encapsulated IPC schema message (optional
// continuation marker, int32 length, Message flatbuffer).
func checkSchemaMessage(raw []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("malformed flatbuffer (%v)", r)
		}
	}()
	msg, err := fbMessage(raw)
	if err != nil {
		return err
	}
	m, err := fbTableAt(msg, 0)
	if err != nil {
		return err
	}
	if err := fbCheckKeyValues(&m, 4); err != nil {
		return err
	}
	if bo := flatbuffers.UOffsetT(m.Offset(4 + 2*3)); bo != 0 && m.GetInt64(bo+m.Pos) != 0 {
		return fmt.Errorf("schema message claims a body of %d bytes", m.GetInt64(bo+m.Pos))
	}
	if ht := m.Offset(4 + 2*1); ht == 0 || m.GetByte(flatbuffers.UOffsetT(ht)+m.Pos) != fbMessageHeaderSchema {
		return fmt.Errorf("message is not a schema")
	}
	ho := flatbuffers.UOffsetT(m.Offset(4 + 2*2))
	if ho == 0 {
		return fmt.Errorf("schema message without a schema")
	}
	var s flatbuffers.Table
	m.Union(&s, ho)
	return fbCheckSchemaTable(&s)
}

// checkFooterFB checks an IPC file footer's schema.
func checkFooterFB(fb []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("malformed flatbuffer (%v)", r)
		}
	}()
	f, err := fbTableAt(fb, 0)
	if err != nil {
		return err
	}
	if err := fbCheckKeyValues(&f, 4); err != nil {
		return err
	}
	o := flatbuffers.UOffsetT(f.Offset(4 + 2*1))
	if o == 0 {
		return fmt.Errorf("footer without a schema")
	}
	s, err := fbTableAt(fb, f.Pos+o)
	if err != nil {
		return err
	}
	return fbCheckSchemaTable(&s)
}

// fbMessage strips the encapsulation of an IPC message.
func fbMessage(raw []byte) ([]byte, error) {
	p := 0
	if len(raw) >= 4 && raw[0] == 0xFF && raw[1] == 0xFF && raw[2] == 0xFF && raw[3] == 0xFF {
		p = 4
	}
	if len(raw) < p+4 {
		return nil, fmt.Errorf("message of %d bytes", len(raw))
	}
	n := int(int32(uint32(raw[p]) | uint32(raw[p+1])<<8 | uint32(raw[p+2])<<16 | uint32(raw[p+3])<<24))
	p += 4
	if n <= 0 || p+n > len(raw) {
		return nil, fmt.Errorf("message length %d out of range", n)
	}
	return raw[p : p+n], nil
}

// checkBatchBuffers checks a record batch message (metadata then body, as
// fetched) before arrow-go decodes it: every buffer lies inside the body and,
// when the body is compressed, the uncompressed sizes arrow-go will allocate
// (the first 8 bytes of each buffer) stay within limit in total.
func checkBatchBuffers(raw []byte, metaLen int, limit int64) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("malformed record batch message (%v)", r)
		}
	}()
	msg, err := fbMessage(raw[:metaLen])
	if err != nil {
		return err
	}
	body := raw[metaLen:]
	m, err := fbTableAt(msg, 0)
	if err != nil {
		return err
	}
	ho := flatbuffers.UOffsetT(m.Offset(4 + 2*2))
	if ho == 0 {
		return fmt.Errorf("record batch without header")
	}
	var rb flatbuffers.Table
	m.Union(&rb, ho)
	compressed := rb.Offset(4+2*3) != 0
	start, n, ok, err := fbVector(&rb, 2, 16)
	if err != nil || !ok {
		return err
	}
	var total int64
	for i := 0; i < n; i++ {
		p := int(start) + 16*i
		off := int64(flatbuffers.GetInt64(msg[p:]))
		length := int64(flatbuffers.GetInt64(msg[p+8:]))
		if off < 0 || length < 0 || off+length > int64(len(body)) {
			return fmt.Errorf("buffer %d [%d, +%d) outside the %d-byte body", i, off, length, len(body))
		}
		if compressed && length >= 8 {
			u := int64(flatbuffers.GetInt64(body[off:]))
			if u < -1 {
				return fmt.Errorf("buffer %d: uncompressed size %d", i, u)
			}
			if u > 0 {
				total += u
			}
		} else {
			total += length
		}
		if total > limit {
			return fmt.Errorf("buffers decompress to more than %d bytes; the file is corrupt, or raise loader.WithMaxRowGroupBytes (the cap on one column chunk's decoded bytes)", limit)
		}
	}
	return nil
}
