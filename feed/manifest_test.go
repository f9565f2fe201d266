package feed

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/manifest"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/transport"
)

// TestPipelineManifestSameSteps: a stream planned from the dataset's
// manifest (the ticket's default, auto) delivers the steps of one planned
// from the footers ("off"), shuffled, padded, two epochs.
func TestPipelineManifestSameSteps(t *testing.T) {
	spec := pipeSpec()
	dir := writeDataset(t, spec)
	ctx := context.Background()
	store := objstore.NewLocalStore()
	m, err := loader.BuildManifest(ctx, store, []string{dir}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := manifest.Write(ctx, store, manifest.DefaultURI(dir), m); err != nil {
		t.Fatal(err)
	}
	ts := startPipeline(t, nil, []string{dir})
	req := pipeRequest(dir, 8, 4, []int{0, 1, 2, 3}, transport.LastBatchPad)
	req.Shuffle = transport.Shuffle{Enabled: true, Window: 5}
	withM, err := readSteps(t, ctx, ts.Client, req, false)
	if err != nil {
		t.Fatal(err)
	}
	off := *req
	off.Manifest = "off"
	without, err := readSteps(t, ctx, ts.Client, &off, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(withM) == 0 || len(withM) != len(without) {
		t.Fatalf("%d steps from the manifest, %d from the footers", len(withM), len(without))
	}
	for i := range withM {
		a, b := withM[i], without[i]
		if !reflect.DeepEqual(a.meta, b.meta) || !reflect.DeepEqual(a.ids, b.ids) || !reflect.DeepEqual(a.labels, b.labels) ||
			!reflect.DeepEqual(a.features, b.features) || !reflect.DeepEqual(a.mask, b.mask) {
			t.Fatalf("step %d differs: %+v\nfrom the footers %+v", i, a, b)
		}
	}
	info, err := ts.Client.GetFlightInfo(ctx, cmdDescriptor(t, req))
	if err != nil {
		t.Fatal(err)
	}
	if want := `"manifest":"` + manifest.DefaultURI(dir) + `"`; !strings.Contains(string(info.AppMetadata), want) {
		t.Fatalf("GetFlightInfo metadata %s lacks %s", info.AppMetadata, want)
	}
}
