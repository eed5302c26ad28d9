// Package kubetest runs a real Kubernetes control plane for tests: etcd
// (Debian's etcd-server, /usr/bin/etcd) and a kube-apiserver built from
// the Go module proxy by scripts/build-kube-apiserver.sh, both on
// loopback, with generated certificates and a bearer token. It writes a
// kubeconfig for clients (Helm, kubectl).
//
// There is no controller manager, scheduler or kubelet: objects are
// stored, validated and admitted (ValidatingAdmissionPolicy included) as
// on a real cluster, but nothing reconciles them, so a Deployment never
// becomes ready. Tests that need readiness use objects that are ready
// when they exist (ConfigMaps, Secrets, ClusterIP Services).
//
// Start skips the test when the binaries are missing, except under
// CI=true, where it fails: CI must run this tier. It is for tests only.
package kubetest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Version is the Kubernetes version scripts/build-kube-apiserver.sh
// builds by default: the one whose client-go (v0.37.0) helm.sh/helm/v3
// v3.22.0 uses.
const Version = "v1.37.0"

// EtcdPath is where Debian's etcd-server package installs etcd.
const EtcdPath = "/usr/bin/etcd"

// Cluster is a running etcd and kube-apiserver.
type Cluster struct {
	// Kubeconfig is the path of a kubeconfig for the cluster (context
	// "kubetest", user with the admin token, in group system:masters).
	Kubeconfig string
	// Server is the API server's URL, https://127.0.0.1:PORT.
	Server string
	// Token is the admin bearer token.
	Token string
	// CAPEM is the PEM of the CA that signed the server's certificate.
	CAPEM []byte
	// Dir holds the certificates, logs and etcd's data.
	Dir string

	etcd, apiserver *proc
}

// proc is a started process and the end of its Wait.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once Wait returned
	err  error         // Wait's error, set before done closes
}

// Options tunes New.
type Options struct {
	// APIServer is the kube-apiserver binary; default FindAPIServer.
	APIServer string
	// Etcd is the etcd binary; default EtcdPath.
	Etcd string
	// Dir is where to keep files; default a new temp dir, removed by Stop.
	Dir string
	// ReadyTimeout bounds the wait for /readyz (default 3m: a loaded
	// 2-core machine starts kube-apiserver in tens of seconds).
	ReadyTimeout time.Duration
	// ExtraArgs are added to kube-apiserver's command line.
	ExtraArgs []string
}

// ErrMissing is wrapped by errors that mean a binary is not installed or
// not built, as opposed to a cluster that failed to start.
var ErrMissing = errors.New("kubetest: binary missing")

// Start starts a cluster for tb and stops it in tb's cleanup. It skips tb
// under -short and when a binary is missing, except under CI=true, where
// a missing binary fails tb.
func Start(tb testing.TB) *Cluster {
	tb.Helper()
	if testing.Short() {
		tb.Skip("-short: skipping the kube-apiserver tier")
	}
	c, err := New(context.Background(), Options{})
	if err != nil {
		if errors.Is(err, ErrMissing) {
			Missing(tb, err)
			return nil
		}
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(c.Stop)
	return c
}

// Missing skips tb because of err, or fails it under CI=true, where a
// skip would let the tier pass without ever running a cluster.
func Missing(tb testing.TB, err error) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatalf("%v (CI=true: the kube-apiserver tier must run; .ci/run builds it)", err)
		return
	}
	tb.Skip(err.Error())
}

// FindAPIServer returns the kube-apiserver binary: $KUBE_APISERVER, else
// .cache/kube/VERSION/kube-apiserver in the repository (where
// scripts/build-kube-apiserver.sh puts it), found by walking up from the
// working directory to the byoc go.mod.
func FindAPIServer() (string, error) {
	if p := os.Getenv("KUBE_APISERVER"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%w: KUBE_APISERVER=%s: %v", ErrMissing, p, err)
		}
		return p, nil
	}
	root, err := repoRoot()
	if err != nil {
		return "", fmt.Errorf("%w: %v; set KUBE_APISERVER", ErrMissing, err)
	}
	p := filepath.Join(root, ".cache", "kube", Version, "kube-apiserver")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%w: no kube-apiserver at %s: build it with scripts/build-kube-apiserver.sh (about 20 minutes on 2 cores), or set KUBE_APISERVER", ErrMissing, p)
	}
	return p, nil
}

// FindKubectl returns kubectl from PATH, else the one
// scripts/build-kube-apiserver.sh builds beside kube-apiserver with
// KUBE_WITH_KUBECTL=1 (what .ci/run does on a machine without kubectl).
func FindKubectl() (string, error) {
	if p, err := exec.LookPath("kubectl"); err == nil {
		return p, nil
	}
	if api, err := FindAPIServer(); err == nil {
		p := filepath.Join(filepath.Dir(api), "kubectl")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: no kubectl on PATH or beside kube-apiserver: KUBE_WITH_KUBECTL=1 scripts/build-kube-apiserver.sh builds one", ErrMissing)
}

// repoRoot walks up from the working directory to byoc's go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(b, []byte("module github.com/byoc-dev/byoc\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the byoc repository")
		}
		dir = parent
	}
}

// New starts etcd and kube-apiserver and waits until the API server is
// ready. Stop them with Stop.
func New(ctx context.Context, opt Options) (*Cluster, error) {
	if opt.APIServer == "" {
		p, err := FindAPIServer()
		if err != nil {
			return nil, err
		}
		opt.APIServer = p
	}
	if opt.Etcd == "" {
		opt.Etcd = EtcdPath
	}
	if _, err := os.Stat(opt.Etcd); err != nil {
		return nil, fmt.Errorf("%w: etcd: %v (apt-get install etcd-server)", ErrMissing, err)
	}
	if opt.ReadyTimeout == 0 {
		opt.ReadyTimeout = 3 * time.Minute
	}
	c := &Cluster{Dir: opt.Dir}
	removeDir := false
	if c.Dir == "" {
		d, err := os.MkdirTemp("", "kubetest-")
		if err != nil {
			return nil, err
		}
		c.Dir, removeDir = d, true
	}
	ok := false
	defer func() {
		if !ok {
			c.stop(removeDir)
		}
	}()
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	etcdClient, etcdPeer, apiPort := ports[0], ports[1], ports[2]
	c.Server = "https://127.0.0.1:" + strconv.Itoa(apiPort)
	if err := c.writeFiles(); err != nil {
		return nil, err
	}

	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(etcdPeer)
	c.etcd, err = c.start("etcd", opt.Etcd,
		"--name=kubetest", "--data-dir="+filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=kubetest="+peerURL,
		// Test data need not survive a power cut.
		"--unsafe-no-fsync")
	if err != nil {
		return nil, err
	}
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(apiPort),
		"--tls-cert-file=" + filepath.Join(c.Dir, "apiserver.crt"),
		"--tls-private-key-file=" + filepath.Join(c.Dir, "apiserver.key"),
		"--client-ca-file=" + filepath.Join(c.Dir, "ca.crt"),
		"--token-auth-file=" + filepath.Join(c.Dir, "tokens.csv"),
		"--service-account-key-file=" + filepath.Join(c.Dir, "sa.key"),
		"--service-account-signing-key-file=" + filepath.Join(c.Dir, "sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-cluster-ip-range=10.96.0.0/24",
		"--authorization-mode=RBAC",
		// The kubernetes Service's endpoints would name the advertise
		// address, which may not be loopback.
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		"--cert-dir=" + filepath.Join(c.Dir, "certs"),
		"--v=1",
	}
	args = append(args, opt.ExtraArgs...)
	c.apiserver, err = c.start("kube-apiserver", opt.APIServer, args...)
	if err != nil {
		return nil, err
	}
	if err := c.waitReady(ctx, opt.ReadyTimeout); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

// Stop kills the API server and etcd and removes the temp dir New made.
func (c *Cluster) Stop() { c.stop(true) }

func (c *Cluster) stop(removeDir bool) {
	for _, p := range []*proc{c.apiserver, c.etcd} {
		if p == nil {
			continue
		}
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
	c.apiserver, c.etcd = nil, nil
	if removeDir && c.Dir != "" && strings.HasPrefix(filepath.Base(c.Dir), "kubetest-") {
		_ = os.RemoveAll(c.Dir)
	}
}

// start runs a process in its own process group, its output in
// DIR/NAME.log, killed if the test process dies.
func (c *Cluster) start(name, bin string, args ...string) (*proc, error) {
	logf, err := os.Create(filepath.Join(c.Dir, name+".log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("kubetest: start %s: %w", name, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// waitReady polls /readyz until it answers 200, a process exits, or the
// timeout passes; errors quote the end of the logs.
func (c *Cluster) waitReady(ctx context.Context, timeout time.Duration) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.CAPEM)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		for name, p := range map[string]*proc{"etcd": c.etcd, "kube-apiserver": c.apiserver} {
			select {
			case <-p.done:
				return fmt.Errorf("kubetest: %s exited during start: %v\n%s", name, p.err, c.LogTail(name, 30))
			default:
			}
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.Server+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+c.Token)
		resp, err := client.Do(req)
		if err == nil {
			body := make([]byte, 2048)
			n, _ := resp.Body.Read(body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, body[:n])
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kubetest: kube-apiserver not ready after %s (last: %s)\n%s", timeout, last, c.LogTail("kube-apiserver", 30))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// LogTail returns the last n lines of a process's log ("etcd" or
// "kube-apiserver").
func (c *Cluster) LogTail(name string, n int) string {
	b, _ := os.ReadFile(filepath.Join(c.Dir, name+".log"))
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Kubectl runs kubectl (FindKubectl) against the cluster and returns its
// combined output. env adds environment variables (KUBE_EDITOR, say).
func (c *Cluster) Kubectl(ctx context.Context, env []string, args ...string) (string, error) {
	kubectl, err := FindKubectl()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// writeFiles generates the CA, the serving certificate, the service
// account key, the token file and the kubeconfig.
func (c *Cluster) writeFiles() error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubetest-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, _ := x509.ParseCertificate(caDER)
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	// Service account tokens are signed with RSA (kube-apiserver's
	// default signing algorithm).
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		return err
	}
	c.Token = fmt.Sprintf("%x", tok)
	c.CAPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	srvKeyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"ca.crt":        c.CAPEM,
		"apiserver.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}),
		"apiserver.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: srvKeyDER}),
		"sa.key":        pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(saKey)}),
		"tokens.csv":    []byte(c.Token + ",kubetest-admin,kubetest-admin,\"system:masters\"\n"),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(c.Dir, name), b, 0o600); err != nil {
			return err
		}
	}
	c.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	return os.WriteFile(c.Kubeconfig, []byte(c.KubeconfigYAML()), 0o600)
}

// KubeconfigYAML is the kubeconfig's content.
func (c *Cluster) KubeconfigYAML() string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kubetest
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: kubetest-admin
  user:
    token: %s
contexts:
- name: kubetest
  context:
    cluster: kubetest
    user: kubetest-admin
current-context: kubetest
`, c.Server, base64.StdEncoding.EncodeToString(c.CAPEM), c.Token)
}

// freePorts returns n distinct loopback ports free right now.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
