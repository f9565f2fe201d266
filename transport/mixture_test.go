package transport

import (
	"errors"
	"strings"
	"testing"
)

// TestMixtureTicket: a mixture ticket decodes; each bad mixture is refused
// with ErrBadRequest naming the field and the source.
func TestMixtureTicket(t *testing.T) {
	const good = `{"version": 1, "global_batch_size": 8, "num_slices": 2, "slices": [0], "last_batch": "drop",
	  "mixture": {"sources": [{"datasets": ["/d/a/*.parquet"], "weight": 0.7, "rename": {"content": "text"},
	                           "shuffle": {"enabled": true, "window": 16}, "columns": [{"name": "content"}]},
	                          {"datasets": ["/d/b/*.parquet"], "weight": 0.3, "seed": 5, "filters": [["lang", "==", "en"]]}],
	              "stop": {"rule": "first_exhausted"}, "source_column": "source",
	              "history": [{"from_step": 0, "weights": [1, 0]}], "weights_from": 10}}`
	r, err := DecodeRequest([]byte(good))
	if err != nil {
		t.Fatalf("DecodeRequest(good mixture) = %v", err)
	}
	if got := string(r.Mixture.Sources[1].Filters); got != `[["lang", "==", "en"]]` {
		t.Errorf("mixture.sources[1].filters = %s, want the source's filters as sent", got)
	}
	if got := r.AllDatasets(); strings.Join(got, ",") != "/d/a/*.parquet,/d/b/*.parquet" {
		t.Errorf("AllDatasets() = %v, want both sources' URIs (the roots check)", got)
	}
	elastic := `{"version": 1, "global_batch_size": 8, "num_slices": 2, "slices": [0], "last_batch": "drop", "start": {"epoch": 0, "step": 3}, ` +
		`"elastic": {"from_slices": 4, "epoch": 0, "step": 3}, "mixture": {"sources": [{"datasets": ["/a"], "weight": 1}], "stop": {"rule": "all_exhausted"}}}`
	if r, err := DecodeRequest([]byte(elastic)); err != nil || r.Elastic == nil || r.Elastic.FromSlices != 4 {
		t.Errorf("DecodeRequest(a mixture with an elastic switch) = %+v, %v; want it accepted", r, err)
	}
	for _, tc := range []struct {
		name, edit, want string
	}{
		{"with datasets", `"datasets": ["/d/c"],`, "together with datasets"},
		{"negative weight", `"mixture": {"sources": [{"datasets": ["/a"], "weight": -1}], "stop": {"rule": "all_exhausted"}},`, "mixture.sources[0] ([/a]): weight -1"},
		{"no sources", `"mixture": {"sources": [], "stop": {"rule": "all_exhausted"}},`, "mixture.sources is empty"},
		{"no files named", `"mixture": {"sources": [{"datasets": [], "weight": 1}], "stop": {"rule": "all_exhausted"}},`, "mixture.sources[0] ([]): datasets is empty"},
		{"stop rule", `"mixture": {"sources": [{"datasets": ["/a"], "weight": 1}], "stop": {"rule": "forever"}},`, `mixture.stop.rule "forever" is unknown`},
		{"num_steps", `"mixture": {"sources": [{"datasets": ["/a"], "weight": 1}], "stop": {"rule": "num_steps"}},`, "num_steps 0 must be > 0"},
		{"rename clash", `"mixture": {"sources": [{"datasets": ["/a"], "weight": 1, "rename": {"a": "x", "b": "x"}}], "stop": {"rule": "all_exhausted"}},`, `both become "x"`},
		{"history length", `"mixture": {"sources": [{"datasets": ["/a"], "weight": 1}], "stop": {"rule": "all_exhausted"}, "history": [{"from_step": 0, "weights": [1, 2]}], "weights_from": 3},`, "history[0] has 2 weights for 1 sources"},
		{"weights_from", `"mixture": {"sources": [{"datasets": ["/a"], "weight": 1}], "stop": {"rule": "all_exhausted"}, "history": [{"from_step": 0, "weights": [1]}]},`, "weights_from 0 is not after"},
		{"elastic epoch", `"elastic": {"from_slices": 1, "epoch": 1, "step": 0}, "mixture": {"sources": [{"datasets": ["/a"], "weight": 1}], "stop": {"rule": "all_exhausted"}},`, "its switch is in epoch 0"},
		{"request filters", `"filters": [["id", ">", 3]], "mixture": {"sources": [{"datasets": ["/a"], "weight": 1}], "stop": {"rule": "all_exhausted"}},`, "mixture.sources[i].filters"},
		{"epochs", `"epochs": 2, "mixture": {"sources": [{"datasets": ["/a"], "weight": 1}], "stop": {"rule": "all_exhausted"}},`, "a mixture is one pass"},
	} {
		ticket := `{"version": 1, "global_batch_size": 8, "num_slices": 2, "slices": [0], "last_batch": "drop", ` +
			strings.TrimSuffix(tc.edit, ",") + `}`
		if !strings.Contains(tc.edit, `"mixture"`) {
			ticket = strings.Replace(good, `"last_batch": "drop",`, `"last_batch": "drop", `+tc.edit, 1)
		}
		_, err := DecodeRequest([]byte(ticket))
		if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: DecodeRequest = %v, want ErrBadRequest naming %q", tc.name, err, tc.want)
		}
	}
}
