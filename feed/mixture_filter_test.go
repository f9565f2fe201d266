package feed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/internal/testseed"
	"github.com/meshfeed/meshfeed/transport"
)

// mixFilters are the sources' filters of filteredMixture: source 0 on a
// column it does not deliver (label, scattered), source 1 on id (sorted:
// statistics rule row groups out, and cut two), source 2 none.
var mixFilters = []string{`[["label", "<", 500]]`, `[["id", ">=", 20], ["id", "<", 70]]`, ""}

// filteredMixture is mixRequest with each source delivering id and
// features (renamed y) and filtered by mixFilters.
func filteredMixture(dirs []string, B, D int, sl []int, policy transport.LastBatch, stop transport.MixtureStop) *transport.Request {
	req := mixRequest(dirs, []float64{0.5, 0.3, 0.2}, B, D, sl, policy, stop)
	for i := range req.Mixture.Sources {
		s := &req.Mixture.Sources[i]
		s.Columns = []transport.Column{{Name: "id"}, {Name: "features"}}
		s.Rename = map[string]string{"features": "y"}
		if mixFilters[i] != "" {
			s.Filters = json.RawMessage(mixFilters[i])
		}
	}
	return req
}

// keptIDs is the ids the single-dataset pipeline delivers for dir with the
// filters (every id when filters is empty), in dataset order.
func keptIDs(t *testing.T, p *Pipeline, dir, filters string) []int64 {
	t.Helper()
	req := filterRequest(dir, filters, 1)
	if filters == "" {
		req.Filters = nil
	}
	ids, _ := streamIDs(t, p, req)
	return ids[0]
}

// TestMixtureFilters: a mixture whose sources have filters delivers exactly
// the model's rows (the sources planned on their kept rows), read in pieces
// under a small read-ahead budget and in whole row groups alike; each
// source's rows are the rows its filter keeps (two processes serving half
// the slices each agree with one serving all), as the single-dataset
// pipeline delivers them with the same filter, once per source epoch; Info
// counts kept rows.
func TestMixtureFilters(t *testing.T) {
	dirs := mixDirs(t)
	mem := checkedMem(t)
	small := newTestPipeline(t, mem)
	large := newFilterPipeline(t, 1<<30, mem)
	var kept [3][]int64
	for i, d := range dirs {
		kept[i] = keptIDs(t, large, d, mixFilters[i])
	}
	// The filters, evaluated apart from meshfeed: datagen's labels and ids.
	var want0 []int64
	for id := range int64(61) {
		if datagen.Label(1, id) < 500 {
			want0 = append(want0, id)
		}
	}
	if !slices.Equal(kept[0], want0) || len(kept[1]) != 50 || kept[1][0] != 20 || len(kept[2]) != 37 {
		t.Fatalf("single-dataset kept rows: source 0 %v (want %v), source 1 %d rows from %v, source 2 %d rows", kept[0], want0, len(kept[1]), kept[1][:1], len(kept[2]))
	}
	const B, D = 12, 4
	for _, tc := range []struct {
		policy transport.LastBatch
		stop   transport.MixtureStop
	}{
		{transport.LastBatchPad, transport.MixtureStop{Rule: "first_exhausted"}},
		{transport.LastBatchPad, transport.MixtureStop{Rule: "all_exhausted"}},
		{transport.LastBatchDrop, transport.MixtureStop{Rule: "num_steps", NumSteps: 25}},
	} {
		name := fmt.Sprintf("%s/%s", tc.policy, tc.stop.Rule)
		req := filteredMixture(dirs, B, D, []int{0, 1, 2, 3}, tc.policy, tc.stop)
		want := mixModel(t, small, req)
		got := readMixture(t, small, req)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: the stream differs from the model:\n got %v\nwant %v", name, got, want)
		}
		if whole := readMixture(t, large, req); fmt.Sprint(whole) != fmt.Sprint(got) {
			t.Fatalf("%s: read in whole row groups, the stream differs from the one read in pieces", name)
		}
		lo := readMixture(t, small, filteredMixture(dirs, B, D, []int{0, 2}, tc.policy, tc.stop))
		hi := readMixture(t, small, filteredMixture(dirs, B, D, []int{1, 3}, tc.policy, tc.stop))
		for s := range got {
			if fmt.Sprint(lo[s][0], lo[s][1], hi[s][0], hi[s][1]) != fmt.Sprint(got[s][0], got[s][2], got[s][1], got[s][3]) {
				t.Fatalf("%s step %d: two processes disagree with one", name, s)
			}
		}
		info, err := small.Info(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		count := map[mixRow]int{}
		var delivered [3]int64
		for _, st := range got {
			for _, sl := range st {
				for _, r := range sl {
					if r.src >= 0 {
						count[r]++
						delivered[r.src]++
					}
				}
			}
		}
		for i := range dirs {
			if si := info.Mixture.Sources[i]; si.Rows != int64(len(kept[i])) || si.DeliveredRows != delivered[i] {
				t.Errorf("%s: source %d: Info says %d rows, %d delivered; want %d kept, %d delivered", name, i, si.Rows, si.DeliveredRows, len(kept[i]), delivered[i])
			}
			in := map[int64]bool{}
			for _, id := range kept[i] {
				in[id] = true
			}
			distinct := 0
			for r, c := range count {
				if r.src != int64(i) {
					continue
				}
				distinct++
				if !in[r.id] {
					t.Errorf("%s: source %d delivered row %d, which its filter does not keep", name, i, r.id)
				}
				// Once per source epoch: within the first, no row twice
				// (each slice's stream starts its next epoch on its own).
				if c > 1 && tc.stop.Rule == "first_exhausted" {
					t.Errorf("%s: source %d row %d delivered %d times", name, i, r.id, c)
				}
			}
			if tc.stop.Rule == "all_exhausted" && distinct != len(kept[i]) {
				t.Errorf("%s: all_exhausted: source %d delivered %d distinct rows of the %d its filter keeps", name, i, distinct, len(kept[i]))
			}
		}
	}
}

// TestMixtureFiltersResume: resuming a filtered mixture at a random step
// gives exactly the rest of the uninterrupted run.
func TestMixtureFiltersResume(t *testing.T) {
	seed := testseed.Get(t, 0, "")
	r := rand.New(rand.NewPCG(seed, 0))
	dirs := mixDirs(t)
	p := newTestPipeline(t, checkedMem(t))
	req := filteredMixture(dirs, 12, 4, []int{0, 1, 2, 3}, transport.LastBatchDrop, transport.MixtureStop{Rule: "num_steps", NumSteps: 20})
	full := readMixture(t, p, req)
	k := r.IntN(len(full))
	req.Start.Step = k
	if got := readMixture(t, p, req); fmt.Sprint(got) != fmt.Sprint(full[k:]) {
		t.Fatalf("resumed at step %d: differs from the uninterrupted run", k)
	}
}

// TestMixtureFiltersBadInput: a bad source filter is refused at plan time
// naming the source (and the file, for a column it lacks); filters on the
// request itself are refused with a mixture.
func TestMixtureFiltersBadInput(t *testing.T) {
	dirs := mixDirs(t)
	p := newTestPipeline(t, checkedMem(t))
	for _, tc := range []struct {
		name string
		edit func(*transport.Request)
		code codes.Code
		want []string
	}{
		{"unknown column", func(r *transport.Request) {
			r.Mixture.Sources[1].Filters = json.RawMessage(`[["lang", "==", "en"]]`)
		}, codes.InvalidArgument, []string{"source 1", dirs[1], ".parquet", `"lang"`}},
		{"unknown op", func(r *transport.Request) {
			r.Mixture.Sources[2].Filters = json.RawMessage(`[["id", "~", 3]]`)
		}, codes.InvalidArgument, []string{"source 2", "~"}},
		{"wrong type", func(r *transport.Request) {
			r.Mixture.Sources[0].Filters = json.RawMessage(`[["id", "==", "x"]]`)
		}, codes.InvalidArgument, []string{"source 0", dirs[0], `"id"`}},
		{"keeps no row", func(r *transport.Request) {
			r.Mixture.Sources[2].Filters = json.RawMessage(`[["id", ">", 1000]]`)
		}, codes.FailedPrecondition, []string{"source 2", "keep no rows"}},
		{"request filters", func(r *transport.Request) {
			r.Filters = json.RawMessage(`[["id", ">", 3]]`)
		}, codes.InvalidArgument, []string{"filters", "mixture", "sources[i].filters"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := filteredMixture(dirs, 12, 4, []int{0}, transport.LastBatchPad, transport.MixtureStop{Rule: "first_exhausted"})
			tc.edit(req)
			var err error
			if err = req.Validate(); err == nil {
				_, err = p.Info(context.Background(), req)
			}
			if err == nil {
				t.Fatalf("planned, want an error")
			}
			code := codes.Unknown
			for _, ec := range append(p.ErrorCodes(), transport.ErrorCode{Target: transport.ErrBadRequest, Code: codes.InvalidArgument}) {
				if errors.Is(err, ec.Target) {
					code = ec.Code
					break
				}
			}
			if code != tc.code || !containsAllStr(err.Error(), tc.want) {
				t.Errorf("%v (%v), want %v naming %q", err, code, tc.code, tc.want)
			}
		})
	}
}
