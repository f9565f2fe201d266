package transport

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestTokenizerColumnTicket(t *testing.T) {
	ticket := `{"version":1,"datasets":["/data/d.parquet"],"columns":[{"name":"text","tokenizer":"gs://models/tok.json","add_special_tokens":false,"length":8,"overflow":"truncate"},{"name":"title","tokenizer":"/models/tok.json"}],"global_batch_size":4,"num_slices":2,"slices":[0],"last_batch":"drop"}`
	r, err := DecodeRequest([]byte(ticket))
	if err != nil {
		t.Fatalf("DecodeRequest(tokenizer columns) = %v", err)
	}
	f := false
	want := []Column{
		{Name: "text", Tokenizer: "gs://models/tok.json", AddSpecialTokens: &f, Length: 8, Overflow: "truncate"},
		{Name: "title", Tokenizer: "/models/tok.json"},
	}
	if !reflect.DeepEqual(r.Columns, want) {
		t.Errorf("columns = %+v, want %+v", r.Columns, want)
	}
	if r.Columns[0].AddSpecial() || !r.Columns[1].AddSpecial() {
		t.Errorf("AddSpecial() = %v, %v; want false (given), true (absent)", r.Columns[0].AddSpecial(), r.Columns[1].AddSpecial())
	}
	b, _ := r.Encode()
	again, err := DecodeRequest(b)
	if err != nil || !reflect.DeepEqual(again, r) {
		t.Errorf("DecodeRequest(Encode(r)) = %+v, %v; want %+v", again, err, r)
	}
	if got := r.Tokenizers(); !reflect.DeepEqual(got, []string{"gs://models/tok.json", "/models/tok.json"}) {
		t.Errorf("Tokenizers() = %q", got)
	}
	mix := &Request{Mixture: &Mixture{Sources: []MixtureSource{{Columns: []Column{{Name: "a"}}}, {Columns: []Column{{Name: "b", Tokenizer: "s3://m/t.json"}}}}}}
	if got := mix.Tokenizers(); !reflect.DeepEqual(got, []string{"s3://m/t.json"}) {
		t.Errorf("mixture Tokenizers() = %q, want the source's", got)
	}

	cases := []struct {
		cols string
		want string
	}{
		{`{"name":"text","add_special_tokens":true}`, `columns[0] "text": add_special_tokens is set without a tokenizer`},
		{`{"name":"text","tokenizer":"/m/t\u0000.json"}`, `columns[0] "text": tokenizer "/m/t\x00.json" holds a NUL byte`},
		{`{"name":"text","tokenizer":"/m/t.json","add_special_tokens":"yes"}`, `add_special_tokens`},
	}
	for _, c := range cases {
		_, err := DecodeRequest([]byte(`{"version":1,"datasets":["/d"],"columns":[` + c.cols + `],"global_batch_size":4,"num_slices":2,"slices":[0],"last_batch":"drop"}`))
		if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("DecodeRequest(columns [%s]) = %v, want ErrBadRequest containing %q", c.cols, err, c.want)
		}
	}
}

func TestTokenizerOutsideRoots(t *testing.T) {
	var locs []location
	for _, r := range []string{"/data", "gs://models/tok"} {
		l, err := parseRoot(r)
		if err != nil {
			t.Fatal(err)
		}
		locs = append(locs, l)
	}
	cases := []struct {
		uri string
		ok  bool
	}{
		{"/data/tokenizer.json", true},
		{"gs://models/tok/tokenizer.json", true},
		{"/etc/tokenizer.json", false},
		{"/data/../etc/tokenizer.json", false},
		{"gs://models/other/tokenizer.json", false},
	}
	for _, c := range cases {
		err := checkRootsOf("tokenizer", []string{c.uri}, locs)
		if (err == nil) != c.ok || (err != nil && (!errors.Is(err, ErrPermissionDenied) || !strings.Contains(err.Error(), "tokenizer "))) {
			t.Errorf("checkRootsOf(tokenizer %q) = %v, want ok=%v (else PermissionDenied naming the tokenizer)", c.uri, err, c.ok)
		}
	}
}
