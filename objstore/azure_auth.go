package objstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/service"
)

// osGetenv reads the environment (a variable so that tests can replace it).
var osGetenv = os.Getenv

// azureCreds is how the Azure store authenticates: a shared key or a SAS
// token for one account, or (neither set) the default credential chain.
type azureCreds struct {
	account      string
	key          string
	sas          string // without the leading '?'
	blobEndpoint string // from a connection string; "" for the default
	err          error  // a malformed option, reported by NewAzureStore
}

// azureCredsFromEnv reads AZURE_STORAGE_CONNECTION_STRING, or
// AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_ACCOUNT_KEY or
// AZURE_STORAGE_SAS_TOKEN (the az CLI's AZURE_STORAGE_ACCOUNT and
// AZURE_STORAGE_KEY are accepted too).
func azureCredsFromEnv(getenv func(string) string) (azureCreds, error) {
	if cs := getenv("AZURE_STORAGE_CONNECTION_STRING"); cs != "" {
		cr, err := parseAzureConnectionString(cs)
		if err != nil {
			return azureCreds{}, fmt.Errorf("objstore: AZURE_STORAGE_CONNECTION_STRING: %w", err)
		}
		return cr, nil
	}
	first := func(names ...string) string {
		for _, n := range names {
			if v := getenv(n); v != "" {
				return v
			}
		}
		return ""
	}
	cr := azureCreds{
		account: first("AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT"),
		key:     first("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_KEY"),
		sas:     strings.TrimPrefix(getenv("AZURE_STORAGE_SAS_TOKEN"), "?"),
	}
	if (cr.key != "" || cr.sas != "") && cr.account == "" {
		return azureCreds{}, errors.New("objstore: an Azure account key or SAS token is set but AZURE_STORAGE_ACCOUNT_NAME is not: set it to the storage account's name")
	}
	return cr, nil
}

// parseAzureConnectionString reads the fields the store uses from a storage
// connection string: AccountName, AccountKey, SharedAccessSignature,
// BlobEndpoint, DefaultEndpointsProtocol and EndpointSuffix. Others
// (QueueEndpoint, ...) are ignored.
func parseAzureConnectionString(s string) (azureCreds, error) {
	f := map[string]string{}
	for _, part := range strings.Split(s, ";") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return azureCreds{}, fmt.Errorf("connection string field %q is not Key=Value", redactField(part))
		}
		f[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
	}
	cr := azureCreds{account: f["accountname"], key: f["accountkey"],
		sas: strings.TrimPrefix(f["sharedaccesssignature"], "?"), blobEndpoint: strings.TrimSuffix(f["blobendpoint"], "/")}
	switch {
	case f["usedevelopmentstorage"] != "":
		return azureCreds{}, errors.New("UseDevelopmentStorage is not supported: give the emulator's AccountName, AccountKey and BlobEndpoint")
	case cr.key == "" && cr.sas == "":
		return azureCreds{}, errors.New("the connection string has neither AccountKey nor SharedAccessSignature")
	case cr.account == "" && cr.key != "":
		return azureCreds{}, errors.New("the connection string has an AccountKey but no AccountName")
	case cr.account == "" && cr.blobEndpoint == "":
		return azureCreds{}, errors.New("the connection string has neither AccountName nor BlobEndpoint")
	}
	if cr.blobEndpoint == "" {
		proto, suffix := f["defaultendpointsprotocol"], f["endpointsuffix"]
		if proto == "" {
			proto = "https"
		}
		if suffix == "" {
			suffix = "core.windows.net"
		}
		cr.blobEndpoint = proto + "://" + cr.account + ".blob." + suffix
	}
	return cr, nil
}

// redactField keeps a connection string field's key only.
func redactField(part string) string {
	if len(part) > 12 {
		return part[:12] + "..."
	}
	return part
}

// serviceURL returns the blob service URL for u and the account it serves.
func (s *AzureStore) serviceURL(u AzureURI) (url, account string, err error) {
	cr := s.cfg.creds
	account = u.Account
	if account == "" {
		account = cr.account
	}
	if s.cfg.endpoint != "" {
		if u.Account != "" && cr.account != "" && u.Account != cr.account {
			return "", "", fmt.Errorf("the URI names storage account %q, but the store's endpoint %s serves account %q", u.Account, s.cfg.endpoint, cr.account)
		}
		return s.cfg.endpoint, account, nil
	}
	if account == "" {
		return "", "", fmt.Errorf("no storage account: set AZURE_STORAGE_ACCOUNT_NAME (or AZURE_STORAGE_CONNECTION_STRING), or name it in the URI: %s://%s@ACCOUNT.dfs.core.windows.net/%s",
			u.Scheme, u.Container, u.Name)
	}
	if u.Host != "" {
		// abfs hosts are ACCOUNT.dfs.SUFFIX; blobs are served at ACCOUNT.blob.SUFFIX.
		return "https://" + strings.Replace(u.Host, ".dfs.", ".blob.", 1), account, nil
	}
	return "https://" + account + ".blob.core.windows.net", account, nil
}

// containerClient returns a client of u's container, making the service
// client of its account on first use.
func (s *AzureStore) containerClient(_ context.Context, u AzureURI) (*container.Client, error) {
	url, account, err := s.serviceURL(u)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.clients[url]; c != nil {
		return c.NewContainerClient(u.Container), nil
	}
	cr := s.cfg.creds
	attempts := s.cfg.retry.maxAttempts
	opts := &service.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: s.http,
		Retry: policy.RetryOptions{
			MaxRetries:    int32(max(attempts-1, -1)),
			RetryDelay:    s.cfg.retry.initialWait,
			MaxRetryDelay: s.cfg.retry.maxWait,
		},
	}}
	if attempts <= 1 {
		opts.Retry.MaxRetries = -1
	}
	if (cr.key != "" || cr.sas != "") && cr.account != "" && account != cr.account {
		return nil, fmt.Errorf("the store's key or SAS token is for storage account %q, not %q", cr.account, account)
	}
	var c *service.Client
	switch {
	case cr.key != "":
		cred, cerr := service.NewSharedKeyCredential(cr.account, cr.key)
		if cerr != nil {
			return nil, fmt.Errorf("Azure shared key of account %q: %w: %w", cr.account, ErrPermission, cerr)
		}
		c, err = service.NewClientWithSharedKeyCredential(url+"/", cred, opts)
	case cr.sas != "":
		c, err = service.NewClientWithNoCredential(url+"/?"+cr.sas, opts)
	default:
		if s.token == nil {
			tc, terr := azidentity.NewDefaultAzureCredential(nil)
			if terr != nil {
				return nil, fmt.Errorf("no Azure credentials (set AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_TOKEN, or log in for the default credential chain): %w: %v",
					ErrPermission, terr)
			}
			s.token = tc
		}
		c, err = service.NewClient(url+"/", s.token, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("Azure client for %s: %w", url, err)
	}
	s.clients[url] = c
	return c.NewContainerClient(u.Container), nil
}
