package transport

import (
	"fmt"
	"strings"
)

// parseAzureLocation parses an Azure Blob Storage URI (objstore.AzureSchemes:
// az://, abfs://, abfss://) as a location of scheme "az": the spellings name
// the same blobs, so a root in one admits URIs in the others. The bucket is
// the container, plus "@" and the host when the URI names an account
// (lowercased, ".dfs." read as ".blob."): a root naming an account admits
// only URIs naming the same one, and a root without one (the server's
// account) admits no URI naming an account. ok is false for other schemes.
func parseAzureLocation(uri string) (loc location, ok bool, err error) {
	scheme, rest, found := strings.Cut(uri, "://")
	if !found || (scheme != "az" && scheme != "abfs" && scheme != "abfss") {
		return location{}, false, nil
	}
	auth, p, _ := strings.Cut(rest, "/")
	container, host, hasHost := strings.Cut(auth, "@")
	if container == "" {
		return location{}, true, fmt.Errorf("%q has no container", uri)
	}
	bucket := container
	if hasHost {
		host = strings.ToLower(host)
		if host == "" || strings.HasPrefix(host, ".") {
			return location{}, true, fmt.Errorf("%q has no storage account before its host's first dot", uri)
		}
		bucket += "@" + strings.Replace(host, ".dfs.", ".blob.", 1)
	}
	return location{scheme: "az", bucket: bucket, segs: segments(p)}, true, nil
}
