package feed

import (
	"context"
	"fmt"
	"slices"

	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/transport"
)

var _ transport.RootedBackend = (*Pipeline)(nil)

// UseRoots implements transport.RootedBackend: the store that NewPipeline created is
// replaced by one confined to roots (objstore.WithRoots), so a symlink or ".."
// cannot lead a request out of them. A Pipeline confined once refuses other
// roots (one Pipeline behind two servers must be given the same ones). A
// store given with WithStore is used as it is: confine it yourself
// (an objstore.LocalStore or Mux with objstore.WithRoots) when it reads local
// files for a server reachable by others.
func (p *Pipeline) UseRoots(roots []string) error {
	roots = append([]string{}, roots...)
	slices.Sort(roots)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ownStore == nil {
		return nil
	}
	if p.roots != nil {
		if !slices.Equal(p.roots, roots) {
			return fmt.Errorf("feed: already confined to the roots %q, asked for %q", p.roots, roots)
		}
		return nil
	}
	opts := append(slices.Clone(p.cfg.storeOpts), objstore.WithLocalOptions(objstore.WithRoots(roots...)))
	m, err := objstore.NewStore(context.Background(), opts...)
	if err != nil {
		return fmt.Errorf("feed: %w", err)
	}
	old := p.ownStore
	p.cfg.store, p.ownStore, p.roots = m, m, roots
	p.cache = make(map[string]cachedDataset)
	return old.Close()
}
