package transport

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

const validTicket = `{"version":1,"datasets":["gs://bucket/train/*.parquet"],"columns":[{"name":"tokens","dtype":"int32","length":512,"overflow":"truncate","fill":0,"pack_ratio":1.5},{"name":"label","fill":"nan"}],"global_batch_size":1024,"num_slices":8,"slices":[2,3],"seed":7,"shuffle":{"enabled":true,"window":65536},"last_batch":"pad","mask_column":"is_real","epochs":3,"start":{"epoch":1,"step":10}}`

func TestDecodeRequestValid(t *testing.T) {
	got, err := DecodeRequest([]byte(validTicket))
	if err != nil {
		t.Fatalf("DecodeRequest(valid) = %v", err)
	}
	want := &Request{
		Version:  1,
		Datasets: []string{"gs://bucket/train/*.parquet"},
		Columns: []Column{
			{Name: "tokens", DType: "int32", Length: 512, Overflow: "truncate", Fill: []byte("0"), PackRatio: 1.5},
			{Name: "label", Fill: []byte(`"nan"`)},
		},
		GlobalBatchSize: 1024, NumSlices: 8, Slices: []int{2, 3}, Seed: 7,
		Shuffle:   Shuffle{Enabled: true, Window: 65536},
		LastBatch: LastBatchPad, MaskColumn: "is_real", Epochs: 3,
		Start: Position{Epoch: 1, Step: 10},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("DecodeRequest(valid) = %+v, want %+v", got, want)
	}
	if got.SliceRows() != 128 || got.Mask() != "is_real" {
		t.Errorf("SliceRows, Mask = %d, %q; want 128, %q", got.SliceRows(), got.Mask(), "is_real")
	}
	// Round trip: Encode then DecodeRequest gives the same request.
	b, err := got.Encode()
	if err != nil {
		t.Fatal(err)
	}
	again, err := DecodeRequest(b)
	if err != nil || !reflect.DeepEqual(again, got) {
		t.Errorf("DecodeRequest(Encode(r)) = %+v, %v; want %+v", again, err, got)
	}
	// Defaults: minimal ticket.
	min, err := DecodeRequest([]byte(`{"version":1,"datasets":["/d"],"global_batch_size":2,"num_slices":1,"slices":[0],"last_batch":"drop"}`))
	if err != nil {
		t.Fatal(err)
	}
	if min.Mask() != DefaultMaskColumn || min.Epochs != 0 || min.Start != (Position{}) || min.Shuffle.Enabled {
		t.Errorf("defaults = %+v", min)
	}
}

func TestDecodeRequestErrors(t *testing.T) {
	base := `"datasets":["/d"],"global_batch_size":4,"num_slices":2,"slices":[0,1],"last_batch":"drop"`
	cases := []struct {
		ticket   string
		sentinel error
		want     []string // substrings of the error, every one required
	}{
		{``, ErrBadRequest, []string{"empty ticket"}},
		{`[1]`, ErrBadRequest, []string{"not a JSON object"}},
		{`{` + base + `}`, ErrBadRequest, []string{`no "version"`}},
		{`{"version":2,` + base + `}`, ErrBadRequest, []string{"version 2 is not supported", "speaks version 1"}},
		{`{"version":1,` + base + `,"extra":1}`, ErrBadRequest, []string{`unknown field "extra"`}},
		{`{"version":1,"datasets":["/d"],"columns":[{"name":"a","typo":1}],"global_batch_size":4,"num_slices":2,"slices":[0],"last_batch":"drop"}`, ErrBadRequest, []string{`unknown field "typo"`}},
		{`{"version":1,` + base + `} {}`, ErrBadRequest, []string{"trailing data"}},
		{`{"version":1,"datasets":["/d"],"global_batch_size":4,"num_slices":2,"slices":[0],"last_batch":"drop","seed":-1}`, ErrBadRequest, []string{"seed"}},
		{`{"version":1,"datasets":[],"global_batch_size":10,"num_slices":4,"slices":[3,1,1,4,-1],"last_batch":"maybe","epochs":-2,"start":{"epoch":-1,"step":-3},"shuffle":{"enabled":false,"window":-5}}`,
			ErrBadRequest, []string{"datasets is empty", "not a multiple of num_slices 4 (remainder 2)", "slices[1] = 1 is less than slices[0] = 3", "slices[2] = 1 is a duplicate",
				"slices[3] = 4 is out of range [0, 4)", "slices[4] = -1 is out of range", `last_batch "maybe" is unknown`, "epochs -2 is negative", "start.epoch -1 is negative",
				"start.step -3 is negative", "shuffle.window -5 is negative", "slices[4] = -1 is less than slices[3] = 4", "12 problems"}},
		{`{"version":1,"datasets":["/d","/d",""],"columns":[{"name":"a","length":-1,"pack_ratio":-2,"fill":true},{"name":"a"},{"name":""}],"global_batch_size":0,"num_slices":0,"slices":[],"last_batch":""}`,
			ErrBadRequest, []string{`datasets[1] "/d" is listed twice`, "datasets[2] is empty", `columns[1] "a" is listed twice`, "columns[2].name is empty",
				"length -1 is negative", "pack_ratio -2 is negative", "fill true is neither", "global_batch_size 0 must be > 0", "num_slices 0 must be > 0",
				"slices is empty", "last_batch is missing"}},
		{`{"version":1,"datasets":["/d"],"columns":[{"name":"a","pack":"greedy"},{"name":"b","eod_token":"</s>"}],"global_batch_size":4,"num_slices":2,"slices":[0],"last_batch":"drop"}`,
			ErrBadRequest, []string{`columns[0] "a": pack "greedy" is unknown`, `columns[1] "b": eod_token goes with pack "concat" only`}},
		{`{"version":1,` + base + `,"mask_column":"m"}`, ErrBadRequest, []string{`mask_column "m" is set but last_batch is "drop"`}},
		{`{"version":1,"datasets":["/d"],"columns":[{"name":"valid"}],"global_batch_size":4,"num_slices":2,"slices":[0],"last_batch":"pad"}`, ErrBadRequest, []string{`mask column "valid" clashes`}},
		{`{"version":1,` + base + `,"epochs":2,"start":{"epoch":2,"step":0}}`, ErrBadRequest, []string{"start.epoch 2 is not below epochs 2"}},
		{`{"version":1,` + base + `,"shuffle":{"enabled":false,"window":8}}`, ErrBadRequest, []string{"shuffle.enabled is false"}},
		{`{"version":1,"datasets":["/` + strings.Repeat("x", MaxTicketBytes) + `"]}`, ErrTicketTooLarge, []string{"limit 65536 bytes"}},
	}
	for _, tc := range cases {
		_, err := DecodeRequest([]byte(tc.ticket))
		if !errors.Is(err, tc.sentinel) {
			t.Errorf("DecodeRequest(%.80q) = %v, want %v", tc.ticket, err, tc.sentinel)
			continue
		}
		if missing := containsAll(err.Error(), tc.want...); len(missing) > 0 {
			t.Errorf("DecodeRequest(%.80q) = %v, lacks %q", tc.ticket, err, missing)
		}
	}
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(validTicket))
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`{"version":1,"slices":[1,0]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeRequest(data)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) && !errors.Is(err, ErrTicketTooLarge) {
				t.Fatalf("DecodeRequest error %v wraps no sentinel", err)
			}
			return
		}
		b, err := r.Encode()
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeRequest(b)
		if err != nil || !reflect.DeepEqual(again, r) {
			t.Fatalf("round trip: %+v, %v; want %+v", again, err, r)
		}
	})
}
