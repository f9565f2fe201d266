package tokcount

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

func TestEncodeDecode(t *testing.T) {
	for _, c := range []*Counts{
		{},
		{RowGroups: [][]int32{{}}},
		{RowGroups: [][]int32{{0, 1, 127, 128, 1 << 30}, {}, {5}}},
	} {
		got, err := Decode(Encode(c))
		if err != nil {
			t.Fatalf("Decode(Encode(%v)) = %v", c.RowGroups, err)
		}
		if len(got.RowGroups) != len(c.RowGroups) {
			t.Fatalf("Decode(Encode(%v)) = %v", c.RowGroups, got.RowGroups)
		}
		for i := range c.RowGroups {
			if !slices.Equal(got.RowGroups[i], c.RowGroups[i]) {
				t.Fatalf("Decode(Encode(%v)) = %v", c.RowGroups, got.RowGroups)
			}
		}
	}
	good := Encode(&Counts{RowGroups: [][]int32{{3, 300}}})
	for _, b := range [][]byte{nil, good[:len(good)-1], append(slices.Clone(good), 0), {1, 1, 0xff, 0xff, 0xff, 0xff, 0x0f}, {0xff}} {
		if _, err := Decode(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Decode(%x) = %v, want ErrCorrupt", b, err)
		}
	}
}

func TestKeyString(t *testing.T) {
	a := Key{Tokenizer: "ab", Column: "text", AddSpecial: true}.String()
	want := `{"tokenizer_sha256":"ab","column":"text","add_special_tokens":true}`
	if a != want {
		t.Errorf("Key.String() = %s, want %s", a, want)
	}
	if b := (Key{Tokenizer: "ab", Column: "text"}).String(); b == a {
		t.Errorf("keys differing in AddSpecial have one form %s", b)
	}
}

func TestMemoryStoreEvicts(t *testing.T) {
	c := &Counts{RowGroups: [][]int32{make([]int32, 100)}}
	per := c.Bytes() + int64(len("f0")+len("k"))
	s := NewMemoryStore(3 * per)
	for i := range 4 {
		s.Put(fmt.Sprintf("f%d", i), "k", c)
	}
	if s.Len() != 3 {
		t.Fatalf("Len = %d, want 3", s.Len())
	}
	if _, ok := s.Get("f0", "k"); ok {
		t.Errorf("f0 (least recently used) was kept")
	}
	if got, ok := s.Get("f3", "k"); !ok || got != c {
		t.Errorf("Get(f3) = %v, %v", got, ok)
	}
	if _, ok := s.Get("f3", "other"); ok {
		t.Errorf("Get with another key answered")
	}
	s.Put("big", "k", &Counts{RowGroups: [][]int32{make([]int32, 1000)}})
	if _, ok := s.Get("big", "k"); ok {
		t.Errorf("counts over the bound were kept")
	}
}
