package objstore

import (
	"strings"
	"testing"
)

func TestParseAzureURI(t *testing.T) {
	for _, c := range []struct {
		uri                            string
		container, account, host, name string
		err                            string
	}{
		{"az://c/a/b.parquet", "c", "", "", "a/b.parquet", ""},
		{"az://c", "c", "", "", "", ""},
		{"az://c/", "c", "", "", "", ""},
		{"abfs://c/x", "c", "", "", "x", ""},
		{"abfs://c@Acct.dfs.core.windows.net/d/x", "c", "acct", "acct.dfs.core.windows.net", "d/x", ""},
		{"abfss://c@acct.dfs.core.chinacloudapi.cn/x", "c", "acct", "acct.dfs.core.chinacloudapi.cn", "x", ""},
		{"az://c@acct.blob.core.windows.net/x", "c", "acct", "acct.blob.core.windows.net", "x", ""},
		{"az:///x", "", "", "", "", "no container"},
		{"az://c@.dfs.core.windows.net/x", "", "", "", "", "no storage account"},
		{"gs://b/x", "", "", "", "", "not an az://"},
		{"az://c/a\x00b", "", "", "", "", "NUL"},
	} {
		u, err := ParseAzureURI(c.uri)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseAzureURI(%q) = %+v, %v; want an error containing %q", c.uri, u, err, c.err)
			}
			continue
		}
		if err != nil || u.Container != c.container || u.Account != c.account || u.Host != c.host || u.Name != c.name {
			t.Errorf("ParseAzureURI(%q) = %+v, %v; want container %q account %q host %q name %q", c.uri, u, err, c.container, c.account, c.host, c.name)
		}
		if err == nil && u.Name != "" && u.String() != c.uri {
			t.Errorf("ParseAzureURI(%q).String() = %q, want the URI as written", c.uri, u.String())
		}
	}
}

func TestAzureCredentials(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	for _, c := range []struct {
		name                        string
		getenv                      func(string) string
		account, key, sas, endpoint string
		err                         string
	}{
		{"nothing: default chain", env(), "", "", "", "", ""},
		{"account and key", env("AZURE_STORAGE_ACCOUNT_NAME", "a", "AZURE_STORAGE_ACCOUNT_KEY", "k"), "a", "k", "", "", ""},
		{"az CLI names", env("AZURE_STORAGE_ACCOUNT", "a", "AZURE_STORAGE_KEY", "k"), "a", "k", "", "", ""},
		{"SAS", env("AZURE_STORAGE_ACCOUNT_NAME", "a", "AZURE_STORAGE_SAS_TOKEN", "?sv=1&sig=x"), "a", "", "sv=1&sig=x", "", ""},
		{"key without account", env("AZURE_STORAGE_ACCOUNT_KEY", "k"), "", "", "", "", "AZURE_STORAGE_ACCOUNT_NAME is not"},
		{"connection string", env("AZURE_STORAGE_CONNECTION_STRING", "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=k==;EndpointSuffix=core.usgovcloudapi.net"),
			"a", "k==", "", "https://a.blob.core.usgovcloudapi.net", ""},
		{"connection string with endpoint", env("AZURE_STORAGE_CONNECTION_STRING", "AccountName=devstoreaccount1;AccountKey=k;BlobEndpoint=http://127.0.0.1:1/devstoreaccount1/;QueueEndpoint=x"),
			"devstoreaccount1", "k", "", "http://127.0.0.1:1/devstoreaccount1", ""},
		{"connection string without secret", env("AZURE_STORAGE_CONNECTION_STRING", "AccountName=a"), "", "", "", "", "neither AccountKey nor SharedAccessSignature"},
		{"connection string malformed", env("AZURE_STORAGE_CONNECTION_STRING", "AccountName=a;garbage"), "", "", "", "", "not Key=Value"},
		{"development storage", env("AZURE_STORAGE_CONNECTION_STRING", "UseDevelopmentStorage=true"), "", "", "", "", "UseDevelopmentStorage"},
	} {
		cfg, err := newAzureConfig(nil, c.getenv)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: newAzureConfig = %v, want an error containing %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || cfg.creds.account != c.account || cfg.creds.key != c.key || cfg.creds.sas != c.sas || cfg.endpoint != c.endpoint {
			t.Errorf("%s: newAzureConfig = %+v, %v; want account %q key %q sas %q endpoint %q", c.name, cfg, err, c.account, c.key, c.sas, c.endpoint)
		}
	}
}

func TestAzureServiceURL(t *testing.T) {
	for _, c := range []struct {
		opts     []AzureOption
		uri      string
		url, err string
	}{
		{[]AzureOption{WithAzureSharedKey("acct", "k")}, "az://c/x", "https://acct.blob.core.windows.net", ""},
		{[]AzureOption{WithAzureSharedKey("acct", "k")}, "abfs://c@acct.dfs.core.windows.net/x", "https://acct.blob.core.windows.net", ""},
		{nil, "abfss://c@other.dfs.core.chinacloudapi.cn/x", "https://other.blob.core.chinacloudapi.cn", ""},
		{nil, "az://c/x", "", "no storage account"},
		{[]AzureOption{WithAzureSharedKey("acct", "k"), WithAzureEndpoint("http://127.0.0.1:9/acct/")}, "az://c/x", "http://127.0.0.1:9/acct", ""},
		{[]AzureOption{WithAzureSharedKey("acct", "k"), WithAzureEndpoint("http://127.0.0.1:9/acct")}, "abfs://c@other.dfs.core.windows.net/x", "", "serves account \"acct\""},
	} {
		cfg, err := newAzureConfig(c.opts, func(string) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		s := &AzureStore{cfg: cfg}
		u, err := ParseAzureURI(c.uri)
		if err != nil {
			t.Fatal(err)
		}
		url, _, err := s.serviceURL(u)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("serviceURL(%q) = %q, %v; want an error containing %q", c.uri, url, err, c.err)
			}
			continue
		}
		if err != nil || url != c.url {
			t.Errorf("serviceURL(%q) = %q, %v; want %q", c.uri, url, err, c.url)
		}
	}
}

// TestCacheKeyETag: two versions with the same size and time but another
// ETag have different cache keys.
func TestCacheKeyETag(t *testing.T) {
	a := Object{URI: "az://c/x", Size: 10, ETag: `"0x1"`}
	b := a
	b.ETag = `"0x2"`
	if a.CacheKey() == b.CacheKey() {
		t.Errorf("CacheKey(%+v) = CacheKey(%+v) = %q", a, b, a.CacheKey())
	}
}
