package loader

import "github.com/meshfeed/meshfeed/objstore"

// factSource is where a Dataset's facts come from: its manifest.
type factSource interface {
	Fact(obj objstore.Object, kind, key string) ([]byte, bool)
}

// Fact returns the fact (kind, key) that the manifest the dataset was
// planned from stores for file fi (manifest.Manifest.Fact), and whether
// there is one; a dataset planned from the footers has none.
//
// The identity compared is the one planning knows: the file's entry in the
// manifest (planning from a manifest makes no Stat). So a fact is returned
// when it was computed from the version of the file the manifest describes,
// and that is the only version any row is read from: the file's identity is
// checked against the same entry when it is first opened for data, and a
// file changed since is refused then (ErrStale), never read. A result
// derived from the fact (a filter's selection) thus always describes the
// bytes delivered, or nothing is delivered.
func (ds *Dataset) Fact(fi int, kind, key string) ([]byte, bool) {
	if ds.facts == nil {
		return nil, false
	}
	return ds.facts.Fact(ds.Files[fi].Object, kind, key)
}
