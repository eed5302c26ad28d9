// Package ocitest starts real registries for tests (Debian's
// docker-registry, distribution 2.8, as a process on a loopback port) and
// builds test content in Go: images of random layers, multi-platform
// indexes, OCI 1.1 artifacts with a subject. Test code only: no binary
// links it (internal/archcheck).
package ocitest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/byoc-dev/byoc/internal/syncbuf"
)

// RegistryBinary is Debian's distribution registry (package
// docker-registry), which .ci/run installs.
const RegistryBinary = "/usr/bin/docker-registry"

// RegistryOptions configure StartRegistry.
type RegistryOptions struct {
	// Username and Password, when set, turn on htpasswd (Basic) auth.
	Username, Password string
	// AuthYAML, when set, is the config's whole "auth:" block (indented
	// by two spaces under it), for token auth; it wins over Username.
	AuthYAML string
	// Delete enables manifest and blob deletion.
	Delete bool
	// Binary is another registry program taking the same "serve CONFIG"
	// and configuration (CNCF Distribution v3 does); RegistryBinary when
	// empty.
	Binary string
}

// Registry is a docker-registry process on a loopback port, with its
// storage in a temp dir kept across Stop and Start.
type Registry struct {
	// Host is 127.0.0.1:PORT.
	Host string
	// Dir holds the config and the storage.
	Dir string

	tb     testing.TB
	bin    string
	config string
	mu     sync.Mutex
	cmd    *exec.Cmd
	out    *syncbuf.Buffer
}

// Need fails (under CI=true) or skips tb when docker-registry is missing.
func Need(tb testing.TB) {
	tb.Helper()
	if _, err := os.Stat(RegistryBinary); err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("%s missing (apt-get install docker-registry; .ci/run does): %v", RegistryBinary, err)
		}
		tb.Skipf("%s missing (apt-get install docker-registry): %v", RegistryBinary, err)
	}
}

var (
	hostsMu sync.Mutex
	hosts   []string
)

// Hosts are the addresses (127.0.0.1:PORT) of every registry this
// process started: an agent started by a test lets its plugins' sandbox
// reach them (agentd --insecure-sandbox-egress-allow), as a customer
// would for a registry on the agent's own machine.
func Hosts() []string {
	hostsMu.Lock()
	defer hostsMu.Unlock()
	return append([]string(nil), hosts...)
}

// StartRegistry starts a registry; it is stopped at the end of the test.
func StartRegistry(tb testing.TB, opts RegistryOptions) *Registry {
	tb.Helper()
	bin := opts.Binary
	if bin == "" {
		Need(tb)
		bin = RegistryBinary
	}
	dir := tb.TempDir()
	port := freePort(tb)
	r := &Registry{Host: fmt.Sprintf("127.0.0.1:%d", port), Dir: dir, tb: tb, bin: bin, config: filepath.Join(dir, "config.yml")}
	hostsMu.Lock()
	if !slices.Contains(hosts, r.Host) { // a port used again by a later registry
		hosts = append(hosts, r.Host)
	}
	hostsMu.Unlock()
	secret := make([]byte, 16)
	rand.Read(secret)
	var cfg strings.Builder
	fmt.Fprintf(&cfg, `version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: %t
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: %s
  secret: %s
`, filepath.Join(dir, "storage"), opts.Delete, r.Host, hex.EncodeToString(secret))
	switch {
	case opts.AuthYAML != "":
		cfg.WriteString("auth:\n" + opts.AuthYAML)
	case opts.Username != "":
		hash, err := bcrypt.GenerateFromPassword([]byte(opts.Password), bcrypt.MinCost)
		if err != nil {
			tb.Fatal(err)
		}
		pw := filepath.Join(dir, "htpasswd")
		if err := os.WriteFile(pw, []byte(opts.Username+":"+string(hash)+"\n"), 0o600); err != nil {
			tb.Fatal(err)
		}
		fmt.Fprintf(&cfg, "auth:\n  htpasswd:\n    realm: byoc-test\n    path: %s\n", pw)
	}
	if err := os.WriteFile(r.config, []byte(cfg.String()), 0o600); err != nil {
		tb.Fatal(err)
	}
	r.Start()
	tb.Cleanup(r.Stop)
	return r
}

// Start starts the registry (again) on its port and waits until it
// answers.
func (r *Registry) Start() {
	r.tb.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		return
	}
	r.out = &syncbuf.Buffer{}
	cmd := exec.Command(r.bin, "serve", r.config)
	// Distribution v3 traces every request through OpenTelemetry and
	// would export the spans to an OTLP collector on localhost.
	cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=none", "OTEL_METRICS_EXPORTER=none", "OTEL_LOGS_EXPORTER=none")
	cmd.Stdout, cmd.Stderr = r.out, r.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		r.tb.Fatalf("start %s: %v", r.bin, err)
	}
	r.cmd = cmd
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + r.Host + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized {
				return
			}
		}
		if time.Now().After(deadline) {
			r.tb.Fatalf("registry on %s not ready after 30s: %v; its output:\n%s", r.Host, err, r.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the registry (its storage stays) and waits until its port
// refuses connections.
func (r *Registry) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
	r.cmd.Wait()
	r.cmd = nil
}

// Output is what the registry printed (since its last start).
func (r *Registry) Output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.out == nil {
		return ""
	}
	return r.out.String()
}

// URL is the registry's location for ocicopy.ParseRegistry.
func (r *Registry) URL() string { return "http://" + r.Host }

func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
