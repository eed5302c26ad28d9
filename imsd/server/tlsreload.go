package server

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// certReloader serves the certificate of --tls-cert and --tls-key, read
// again at the first TLS handshake after either file changed (its
// modification time or size), so a renewed certificate is served without
// a restart. A pair that does not load is logged and the previous one
// kept.
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger

	mu   sync.Mutex
	cert *tls.Certificate
	seen [2]fileStamp
}

type fileStamp struct {
	mod  time.Time
	size int64
}

func stamp(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{fi.ModTime(), fi.Size()}
}

// newCertReloader loads the pair once: a pair that does not load at
// start is an error naming the flags.
func newCertReloader(certFile, keyFile string, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: log}
	r.seen = [2]fileStamp{stamp(certFile), stamp(keyFile)}
	c, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert %s, --tls-key %s: %w", certFile, keyFile, err)
	}
	r.cert = &c
	return r, nil
}

// GetCertificate implements tls.Config.GetCertificate.
func (r *certReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	now := [2]fileStamp{stamp(r.certFile), stamp(r.keyFile)}
	r.mu.Lock()
	defer r.mu.Unlock()
	if now != r.seen {
		r.seen = now
		c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
		if err != nil {
			// Often a renewal halfway: the certificate written, the key
			// not yet. The next handshake after the next change tries again.
			r.log.Error("TLS certificate changed but does not load; serving the previous one", "cert", r.certFile, "key", r.keyFile, "err", err)
		} else {
			r.cert = &c
			r.log.Info("TLS certificate reloaded", "cert", r.certFile)
		}
	}
	return r.cert, nil
}
