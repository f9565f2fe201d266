package feed

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/meshfeed/meshfeed/transport"
)

// TestNewPipelineValidate: every bad setting is reported at once, none is
// clamped silently.
func TestNewPipelineValidate(t *testing.T) {
	_, err := NewPipeline(context.Background(), WithReadAhead(-1), WithCacheTTL(-1))
	if !errors.Is(err, transport.ErrConfig) {
		t.Fatalf("NewPipeline(read-ahead -1, cache TTL -1) = %v, want ErrConfig", err)
	}
	if missing := containsAll(err.Error(), "read-ahead -1", "cache TTL -1ns"); len(missing) > 0 {
		t.Errorf("error %q lacks %q", err, missing)
	}
	p, err := NewPipeline(context.Background(), WithReadAhead(0), WithCacheTTL(0))
	if err != nil {
		t.Fatalf("NewPipeline(read-ahead 0, cache TTL 0) = %v, want nil", err)
	}
	p.Close()
}

// TestConfigOf: the request is mapped onto the packages' types once, with
// every problem of its columns reported together.
func TestConfigOf(t *testing.T) {
	req := &transport.Request{
		Version: transport.Version, Datasets: []string{"/d"}, GlobalBatchSize: 8, NumSlices: 2, Slices: []int{1},
		LastBatch: transport.LastBatchPad, Seed: 3, Shuffle: transport.Shuffle{Enabled: true, Window: 4},
		Columns: []transport.Column{{Name: "a", Fill: []byte("7")}, {Name: "b"}, {Name: "c", DType: "float32"}},
		Start:   transport.Position{Epoch: 1, Step: 2}, Epochs: 3,
	}
	c, err := configOf(req)
	if err != nil {
		t.Fatal(err)
	}
	if c.plan.GlobalBatch != 8 || c.plan.D != 2 || c.plan.Seed != 3 || !c.plan.ShuffleRowGroups || c.plan.Window != 4 ||
		c.mask != "valid" || c.start.Epoch != 1 || c.start.Step != 2 || c.epochs != 3 || strings.Join(c.columns, ",") != "a,b,c" {
		t.Errorf("configOf = %+v", c)
	}
	if len(c.shaping) != 2 || c.shaping[0].Name != "a" || c.shaping[1].Name != "c" || c.fills["a"] != 7 {
		t.Errorf("configOf shaping = %+v, fills %v; want a (fill 7) and c", c.shaping, c.fills)
	}
	req.Columns = []transport.Column{{Name: "a", DType: "complex64"}, {Name: "b", Overflow: "wrap"}, {Name: "t", Length: 4, PackRatio: 1.5}}
	_, err = configOf(req)
	if !errors.Is(err, transport.ErrBadRequest) {
		t.Fatalf("configOf(bad columns) = %v, want ErrBadRequest", err)
	}
	if missing := containsAll(err.Error(), "3 problems", `dtype "complex64"`, `overflow "wrap"`, `pack_ratio 1.5`); len(missing) > 0 {
		t.Errorf("error %q lacks %q", err, missing)
	}
}
