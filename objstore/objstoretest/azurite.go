package objstoretest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/service"
	"github.com/meshfeed/meshfeed/objstore"
)

// Azurite's well-known development account (public, in Azurite's
// documentation): every Azurite accepts it.
const (
	AzuriteAccount = "devstoreaccount1"
	AzuriteKey     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// Environment variables of the Azurite harness.
const (
	// EnvAzurite names the Azurite to run: the directory npm installed it
	// into (holding node_modules/azurite) or its blob main.js. Default:
	// .azurite in the repository (make azurite-setup), found by walking up
	// from the test's working directory.
	EnvAzurite = "MESHFEED_AZURITE"
	// EnvSkipAzurite, set to 1, skips the tests that need Azurite when it
	// is not installed, instead of failing them.
	EnvSkipAzurite = "MESHFEED_SKIP_AZURITE"
)

// azuriteMain is the blob service's entry point inside an npm prefix.
const azuriteMain = "node_modules/azurite/dist/src/blob/main.js"

// Azurite is a running Azurite blob service (npm azurite, run with node) on
// 127.0.0.1, in memory.
type Azurite struct {
	// URL is the blob service URL of the development account,
	// "http://127.0.0.1:PORT/devstoreaccount1": pass it to
	// objstore.WithAzureEndpoint.
	URL string
	// Base is "http://127.0.0.1:PORT", for a proxy in front (the account
	// is the first path segment).
	Base string

	cmd      *exec.Cmd
	waitExit chan error
	stderr   *bytes.Buffer
	stopOnce sync.Once
	next     atomic.Int64
}

// StartAzurite starts an Azurite of its own for this test, stopped (its
// process group killed) at the test's end. Tests of a package usually share
// one: see SharedAzurite.
func StartAzurite(t testing.TB) *Azurite {
	t.Helper()
	a, err := startAzurite(t)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	return a
}

var shared struct {
	mu  sync.Mutex
	a   *Azurite
	err error
}

// SharedAzurite returns the package's Azurite, started by the first test
// that asks (node starts in seconds; one per package saves the CPU). Each
// test makes containers of its own (Container). The package's TestMain must
// call StopSharedAzurite after m.Run; the process also dies with the test
// binary on Linux.
func SharedAzurite(t testing.TB) *Azurite {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.a == nil && shared.err == nil {
		shared.a, shared.err = startAzurite(t)
	}
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.a
}

// StopSharedAzurite stops the Azurite of SharedAzurite, if one was started.
func StopSharedAzurite() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.a != nil {
		shared.a.Stop()
		shared.a = nil
	}
}

// azuriteScript returns the path of Azurite's blob main.js, or skips or
// fails t saying how to install it.
func azuriteScript(t testing.TB) string {
	t.Helper()
	missing := func(why string) string {
		msg := "objstoretest: Azurite is not installed (" + why + "): run `make azurite-setup` (npm azurite into .azurite/), or set " +
			EnvAzurite + " to an npm prefix holding azurite"
		if os.Getenv(EnvSkipAzurite) == "1" {
			t.Skip(msg + "; skipped because " + EnvSkipAzurite + "=1")
		}
		t.Fatal(msg + " (or set " + EnvSkipAzurite + "=1 to skip the tests that need it)")
		return ""
	}
	if _, err := exec.LookPath("node"); err != nil {
		return missing("no node on PATH")
	}
	if env := os.Getenv(EnvAzurite); env != "" {
		p := env
		if !strings.HasSuffix(p, ".js") {
			p = filepath.Join(env, azuriteMain)
		}
		if _, err := os.Stat(p); err != nil {
			return missing(fmt.Sprintf("%s=%s: %v", EnvAzurite, env, err))
		}
		return p
	}
	wd, err := os.Getwd()
	if err != nil {
		return missing(err.Error())
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		p := filepath.Join(dir, ".azurite", azuriteMain)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil || filepath.Dir(dir) == dir {
			return missing("no " + filepath.Join(dir, ".azurite", azuriteMain))
		}
	}
}

// startAzurite starts Azurite on a free port of 127.0.0.1 and waits until
// it answers. A port taken between the choice and the bind is retried.
func startAzurite(t testing.TB) (*Azurite, error) {
	t.Helper()
	script := azuriteScript(t)
	var err error
	for range 3 {
		var a *Azurite
		if a, err = launchAzurite(script); err == nil {
			return a, nil
		}
	}
	return nil, err
}

func launchAzurite(script string) (*Azurite, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command("node", script,
		"--blobHost", "127.0.0.1", "--blobPort", fmt.Sprint(port),
		"--inMemoryPersistence", "--skipApiVersionCheck", "--loose",
		"--disableTelemetry", "--silent")
	cmd.Dir = os.TempDir() // in memory: it writes nothing
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	cmd.SysProcAttr = azuriteProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("objstoretest: start Azurite (%s): %v", script, err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	a := &Azurite{URL: base + "/" + AzuriteAccount, Base: base, cmd: cmd, stderr: &stderr}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case err := <-exited:
			return nil, fmt.Errorf("objstoretest: Azurite exited before it answered (%v): %s", err, stderr.String())
		default:
		}
		if resp, err := client.Get(a.URL + "?comp=list"); err == nil {
			resp.Body.Close()
			a.waitExit = exited
			return a, nil
		}
		if time.Now().After(deadline) {
			a.kill()
			<-exited
			return nil, fmt.Errorf("objstoretest: Azurite did not answer at %s within 60s: %s", a.URL, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (a *Azurite) kill() {
	// The process group: node and anything it started.
	syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
}

// Stop kills Azurite's process group. Safe to call more than once.
func (a *Azurite) Stop() {
	a.stopOnce.Do(func() {
		a.kill()
		<-a.waitExit
	})
}

// ConnectionString returns the development account's connection string
// (for AZURE_STORAGE_CONNECTION_STRING).
func (a *Azurite) ConnectionString() string {
	return "DefaultEndpointsProtocol=http;AccountName=" + AzuriteAccount + ";AccountKey=" + AzuriteKey + ";BlobEndpoint=" + a.URL + ";"
}

// Store returns an AzureStore on this Azurite (or, with endpoint set, on a
// proxy in front of it: "http://127.0.0.1:PORT", the account is appended)
// authenticated with the development key, closed at the end of the test.
// opts come after the endpoint and the key.
func (a *Azurite) Store(t testing.TB, opts ...objstore.AzureOption) *objstore.AzureStore {
	t.Helper()
	return NewAzureStoreAt(t, a.URL, opts...)
}

// NewAzureStoreAt returns an AzureStore on the blob service URL url
// (Azurite's URL, or a proxy's base URL plus "/devstoreaccount1")
// authenticated with the development key, closed at the end of the test.
func NewAzureStoreAt(t testing.TB, url string, opts ...objstore.AzureOption) *objstore.AzureStore {
	t.Helper()
	s, err := objstore.NewAzureStore(context.Background(), append([]objstore.AzureOption{
		objstore.WithAzureEndpoint(url), objstore.WithAzureSharedKey(AzuriteAccount, AzuriteKey),
	}, opts...)...)
	if err != nil {
		t.Fatalf("objstoretest: Azure store at %s: %v", url, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var nonName = regexp.MustCompile(`[^a-z0-9]+`)

// Container creates a new, empty container named after the test and returns
// its name.
func (a *Azurite) Container(t testing.TB) string {
	t.Helper()
	name := strings.Trim(nonName.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	suffix := fmt.Sprintf("-%d", a.next.Add(1))
	name = strings.TrimRight(name[:min(len(name), 63-len(suffix))], "-") + suffix
	if len(name) < 3 {
		name = "c" + name + "xx"
	}
	a.CreateContainer(t, name)
	return name
}

// CreateContainer creates the named container.
func (a *Azurite) CreateContainer(t testing.TB, name string) {
	t.Helper()
	cred, err := service.NewSharedKeyCredential(AzuriteAccount, AzuriteKey)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.NewClientWithSharedKeyCredential(a.URL+"/", cred, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreateContainer(context.Background(), name, nil); err != nil {
		t.Fatalf("objstoretest: create Azurite container %q: %v", name, err)
	}
}
