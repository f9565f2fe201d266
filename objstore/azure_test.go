package objstore_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/objstore/objstoretest"
)

// TestMain stops the package's shared Azurite (objstoretest.SharedAzurite).
func TestMain(m *testing.M) {
	code := m.Run()
	objstoretest.StopSharedAzurite()
	os.Exit(code)
}

// TestAzureConformance runs the store contract on Azurite, for each URI
// spelling: az://, abfs://, and abfs:// naming the account in its host.
func TestAzureConformance(t *testing.T) {
	az := objstoretest.SharedAzurite(t)
	for _, spell := range []struct{ name, root string }{
		{"az", "az://%s/suite"},
		{"abfs", "abfs://%s/suite"},
		{"abfs_account_host", "abfs://%s@" + objstoretest.AzuriteAccount + ".dfs.core.windows.net/suite"},
	} {
		t.Run(spell.name, func(t *testing.T) {
			objstoretest.Conformance(t, func(t *testing.T) (objstore.Store, string) {
				c := az.Container(t)
				return az.Store(t), fmt.Sprintf(spell.root, c)
			}, nil)
		})
	}
}
