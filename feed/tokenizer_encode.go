package feed

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"unicode/utf8"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/internal/arrowmem"
	"github.com/meshfeed/meshfeed/tokenize"
)

// TokenType is the type of a tokenized column: list<int32>, the type
// list shaping takes.
var TokenType = arrow.ListOf(arrow.PrimitiveTypes.Int32)

// TextError is a row whose text cannot be tokenized: not valid UTF-8
// (tokenize.ErrInvalidUTF8, which it wraps). Row counts from the array's
// first row; Byte is the offset of the first invalid byte in the row's
// text. Callers add the file, row group and the row in the file.
type TextError struct {
	Row  int
	Byte int
	Err  error
}

func (e *TextError) Error() string {
	return fmt.Sprintf("row %d byte %d: %v", e.Row, e.Byte, e.Err)
}

func (e *TextError) Unwrap() error { return e.Err }

// stringRows is what encoding reads of a string or large_string array.
type stringRows interface {
	arrow.Array
	Value(i int) string
	ValueLen(i int) int
}

// asStrings returns arr as a string or large_string array.
func asStrings(arr arrow.Array) (stringRows, bool) {
	switch a := arr.(type) {
	case *array.String:
		return a, true
	case *array.LargeString:
		return a, true
	}
	return nil, false
}

// EncodeStrings appends the ids of every row of arr (a string or
// large_string array) to values and each row's end offset to offsets, as
// tokenize.EncodeBatch does (row i's ids are
// tok.Encode(arr.Value(i), addSpecial)), on up to workers goroutines (0:
// GOMAXPROCS). A null row has no ids (its end offset repeats the one
// before). Text that is not valid UTF-8 is a *TextError naming the row and
// byte; on error values and offsets are as given.
func EncodeStrings(tok *tokenize.Tokenizer, arr arrow.Array, addSpecial bool, workers int, values []int32, offsets []int64) ([]int32, []int64, error) {
	strs, ok := asStrings(arr)
	if !ok {
		return values, offsets, fmt.Errorf("tokenize: a tokenizer needs a string or large_string column, not %s", arr.DataType())
	}
	n := strs.Len()
	if strs.NullN() == 0 {
		v, o, err := tok.EncodeBatch(values, offsets, n, workers, addSpecial, strs.Value)
		return v, o, textError(err, strs, nil)
	}
	// Encode the rows that are not null, then give the null ones their
	// empty ranges.
	rows := make([]int, 0, n-strs.NullN())
	for i := range n {
		if strs.IsValid(i) {
			rows = append(rows, i)
		}
	}
	base := len(offsets)
	v, o, err := tok.EncodeBatch(values, offsets, len(rows), workers, addSpecial, func(i int) string { return strs.Value(rows[i]) })
	if err != nil {
		return values, offsets, textError(err, strs, rows)
	}
	ends := append([]int64(nil), o[base:]...)
	o = o[:base]
	prev := int64(len(values))
	k := 0
	for i := range n {
		if k < len(rows) && rows[k] == i {
			prev = ends[k]
			k++
		}
		o = append(o, prev)
	}
	return v, o, nil
}

// textError turns EncodeBatch's invalid UTF-8 error into a *TextError
// naming the first row of arr (of rows, when not nil) that is not valid
// UTF-8, the one EncodeBatch stopped at, and its first invalid byte.
func textError(err error, strs stringRows, rows []int) error {
	if err == nil || !errors.Is(err, tokenize.ErrInvalidUTF8) {
		return err
	}
	n := strs.Len()
	if rows != nil {
		n = len(rows)
	}
	for i := range n {
		r := i
		if rows != nil {
			r = rows[i]
		}
		s := strs.Value(r)
		if utf8.ValidString(s) {
			continue
		}
		b := 0
		for b < len(s) {
			c, size := utf8.DecodeRuneInString(s[b:])
			if c == utf8.RuneError && size <= 1 {
				break
			}
			b += size
		}
		return &TextError{Row: r, Byte: b, Err: tokenize.ErrInvalidUTF8}
	}
	return err
}

// idScratch holds the ids and offsets of one TokenizeStrings call before
// they are copied into Arrow memory of their exact size.
type idScratch struct {
	ids  []int32
	ends []int64
}

var idScratchPool = sync.Pool{New: func() any { return &idScratch{} }}

// maxScratchIDs bounds the scratch kept in the pool (64 MiB of ids).
const maxScratchIDs = 16 << 20

// TokenizeStrings returns arr (a string or large_string array) tokenized:
// a list<int32> array (TokenType) whose row i holds
// tok.Encode(arr.Value(i), addSpecial), a null row a null list, allocated
// from mem; workers as EncodeStrings. The ids are encoded into reused
// scratch and copied once into buffers of their exact size (a copy of 4
// bytes per id, small beside encoding it). Errors as EncodeStrings; more
// than 2^31-1 ids in one array is an error too (list offsets are int32).
func TokenizeStrings(tok *tokenize.Tokenizer, arr arrow.Array, addSpecial bool, workers int, mem memory.Allocator) (arrow.Array, error) {
	sc := idScratchPool.Get().(*idScratch)
	defer func() {
		if cap(sc.ids) <= maxScratchIDs {
			idScratchPool.Put(sc)
		}
	}()
	ids, ends, err := EncodeStrings(tok, arr, addSpecial, workers, sc.ids[:0], sc.ends[:0])
	sc.ids, sc.ends = ids, ends
	if err != nil {
		return nil, err
	}
	if len(ids) > math.MaxInt32 {
		return nil, fmt.Errorf("tokenize: %d rows give %d ids, over the 2^31-1 a list column holds: read smaller row groups", arr.Len(), len(ids))
	}
	n := arr.Len()
	vb := arrowmem.NewOverwriteBuffer(mem, 4*len(ids))
	copy(unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(vb.Bytes()))), len(ids)), ids)
	ob := arrowmem.NewOverwriteBuffer(mem, 4*(n+1))
	offs := unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(ob.Bytes()))), n+1)
	offs[0] = 0
	for i, e := range ends {
		offs[i+1] = int32(e)
	}
	var validity *memory.Buffer
	nulls := arr.NullN()
	if nulls > 0 {
		validity = memory.NewResizableBuffer(mem)
		validity.Resize(int((n + 7) / 8))
		vbits := validity.Bytes()
		clear(vbits)
		for i := range n {
			if arr.IsValid(i) {
				vbits[i/8] |= 1 << (i % 8)
			}
		}
	}
	values := array.NewData(arrow.PrimitiveTypes.Int32, len(ids), []*memory.Buffer{nil, vb}, nil, 0, 0)
	defer values.Release()
	data := array.NewData(TokenType, n, []*memory.Buffer{validity, ob}, []arrow.ArrayData{values}, nulls, 0)
	defer data.Release()
	vb.Release()
	ob.Release()
	if validity != nil {
		validity.Release()
	}
	return array.MakeFromData(data), nil
}
