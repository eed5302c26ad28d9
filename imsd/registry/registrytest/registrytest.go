// Package registrytest starts a real distribution registry (Debian's
// docker-registry, 2.8) for tests: on a loopback port, storing in a temp
// dir, with or without imsd's token authentication. Under CI=true a
// missing binary fails the test instead of skipping it.
package registrytest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/registry"
	"github.com/byoc-dev/byoc/internal/syncbuf"
)

// Binary is the registry program.
const Binary = "docker-registry"

// Registry is a running registry.
type Registry struct {
	// Host is host:port.
	Host string
	Dir  string
	cfg  registry.Config
	tb   testing.TB
	cmd  *exec.Cmd
	out  *syncbuf.Buffer
}

// Options configure Start. With Realm set the registry uses token
// authentication against it, trusting the certificate at RootCertBundle.
type Options struct {
	// Addr is the listen address (default: a free loopback port).
	Addr           string
	Realm          string
	Service        string
	RootCertBundle string
}

// Require skips (or, under CI=true, fails) tb when the registry binary is
// missing, and returns its path.
func Require(tb testing.TB) string {
	tb.Helper()
	p, err := exec.LookPath(Binary)
	if err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("%s not found (apt-get install docker-registry; .ci/run installs it)", Binary)
		}
		tb.Skipf("%s not found (apt-get install docker-registry)", Binary)
	}
	return p
}

// Start starts a registry and stops it at the end of the test.
func Start(tb testing.TB, o Options) *Registry {
	tb.Helper()
	Require(tb)
	host := o.Addr
	if host == "" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		host = l.Addr().String()
		l.Close()
	}
	dir := tb.TempDir()
	r := &Registry{Host: host, Dir: dir, tb: tb, cfg: registry.Config{Addr: host, RootDir: filepath.Join(dir, "data"),
		Realm: o.Realm, Service: o.Service, RootCertBundle: o.RootCertBundle}}
	if err := os.WriteFile(filepath.Join(dir, "config.yml"), r.cfg.YAML(), 0o600); err != nil {
		tb.Fatal(err)
	}
	r.StartAgain()
	tb.Cleanup(r.Stop)
	return r
}

// StartAgain starts the registry on its address after Stop (same data).
func (r *Registry) StartAgain() {
	r.tb.Helper()
	r.out = &syncbuf.Buffer{}
	cmd := exec.Command(Binary, "serve", filepath.Join(r.Dir, "config.yml"))
	cmd.Stdout, cmd.Stderr = r.out, r.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		r.tb.Fatalf("start %s: %v", Binary, err)
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
			r.Stop()
			r.tb.Fatalf("registry on %s not ready after 30s: %v\n%s", r.Host, err, r.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop stops the registry (SIGTERM, then SIGKILL) and waits for it; it
// may be called twice.
func (r *Registry) Stop() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = r.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = r.cmd.Process.Kill()
		<-done
	}
	r.cmd = nil
}

// Output is what the registry printed.
func (r *Registry) Output() string { return r.out.String() }

// Ping reports whether the registry answers.
func (r *Registry) Ping(ctx context.Context) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.Host+"/v2/", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusUnauthorized {
		return fmt.Errorf("registry answered %s", resp.Status)
	}
	return nil
}
