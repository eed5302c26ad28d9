package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// writeCert writes a self-signed certificate with serial to certFile and
// keyFile, dated mod.
func writeCert(t *testing.T, certFile, keyFile string, serial int64, mod time.Time) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "imsd"}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for f, b := range map[string][]byte{
		certFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyFile:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
	} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(f, mod, mod); err != nil {
			t.Fatal(err)
		}
	}
}

// A --tls-cert replaced on disk is served from the next handshake, with
// no restart; a pair that does not load leaves the previous one served.
func TestTLSCertificateReloaded(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	t0 := time.Now().Add(-time.Minute).Truncate(time.Second)
	writeCert(t, certFile, keyFile, 1, t0)
	srv, err := New(context.Background(), Config{Addr: "127.0.0.1:0", DataDir: dir, TLSCertFile: certFile, TLSKeyFile: keyFile,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	serial := func() int64 {
		t.Helper()
		c, err := tls.Dial("tcp", srv.Addr(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test reads which certificate is served
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	if got := serial(); got != 1 {
		t.Fatalf("serial %d, want 1", got)
	}
	writeCert(t, certFile, keyFile, 2, t0.Add(time.Second))
	if got := serial(); got != 2 {
		t.Fatalf("after the renewal: serial %d, want 2", got)
	}
	// Half a renewal: a certificate without its key.
	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := serial(); got != 2 {
		t.Fatalf("with a broken key: serial %d, want the previous 2", got)
	}
	writeCert(t, certFile, keyFile, 3, t0.Add(2*time.Second))
	if got := serial(); got != 3 {
		t.Fatalf("after the renewal completed: serial %d, want 3", got)
	}
}
