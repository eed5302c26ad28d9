package ocitest

import (
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// Proxy is an HTTP proxy in front of a registry that counts the blob
// bytes uploaded through it, per digest, and can tamper with what it
// passes on.
type Proxy struct {
	// Host is the proxy's 127.0.0.1:PORT.
	Host string

	mu sync.Mutex
	// tamper, if set, may change a blob download's body: SetTamper.
	tamper func(digest string, body io.Reader) io.Reader
	// rate, if set, slows uploads down: SetUploadRate.
	rate    int64
	uploads map[string]int64
	puts    map[string]int
}

// StartProxy starts a proxy to the registry at host (HOST:PORT), closed
// at the end of the test.
func StartProxy(tb testing.TB, host string) *Proxy {
	tb.Helper()
	p := &Proxy{uploads: map[string]int64{}, puts: map[string]int{}}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: host})
	rp.ModifyResponse = func(resp *http.Response) error {
		req := resp.Request
		p.mu.Lock()
		tamper := p.tamper
		p.mu.Unlock()
		if tamper != nil && req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/sha256:") && resp.StatusCode == http.StatusOK {
			d := req.URL.Path[strings.LastIndex(req.URL.Path, "/")+1:]
			resp.Body = struct {
				io.Reader
				io.Closer
			}{tamper(d, resp.Body), resp.Body}
		}
		return nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p.Host = l.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if (r.Method == http.MethodPut || r.Method == http.MethodPatch) && strings.Contains(r.URL.Path, "/blobs/uploads/") {
			d := r.URL.Query().Get("digest")
			p.mu.Lock()
			rate := p.rate
			p.mu.Unlock()
			r.Body = &countingBody{ReadCloser: r.Body, rate: rate, add: func(n int64) {
				p.mu.Lock()
				p.uploads[d] += n
				p.mu.Unlock()
			}}
			if r.Method == http.MethodPut {
				p.mu.Lock()
				p.puts[d]++
				p.mu.Unlock()
			}
		}
		rp.ServeHTTP(w, r)
	})}
	go srv.Serve(l)
	tb.Cleanup(func() { srv.Close() })
	return p
}

// SetTamper sets (or, with nil, removes) a function that may change a
// blob download's body (GET of /v2/.../blobs/DIGEST); it is called with
// the digest. Safe while requests are in flight: a request uses the
// function set when its response arrived.
func (p *Proxy) SetTamper(f func(digest string, body io.Reader) io.Reader) {
	p.mu.Lock()
	p.tamper = f
	p.mu.Unlock()
}

// SetUploadRate slows every upload that starts afterwards down to about
// bytesPerSecond (0: no limit), so a test can act in the middle of a copy.
func (p *Proxy) SetUploadRate(bytesPerSecond int64) {
	p.mu.Lock()
	p.rate = bytesPerSecond
	p.mu.Unlock()
}

// Uploaded is how many bytes of blob digest the proxy passed on in
// uploads (PUT ...?digest=), over all attempts; bytes sent in PATCH
// requests (chunked uploads) count under "".
func (p *Proxy) Uploaded(digest string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.uploads[digest]
}

// Puts is how many uploads of digest were started.
func (p *Proxy) Puts(digest string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.puts[digest]
}

// TotalUploaded is the blob bytes passed on in uploads (PATCH and PUT),
// over all blobs.
func (p *Proxy) TotalUploaded() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var n int64
	for _, v := range p.uploads {
		n += v
	}
	return n
}

type countingBody struct {
	io.ReadCloser
	add  func(int64)
	rate int64
}

func (c *countingBody) Read(b []byte) (int, error) {
	if c.rate > 0 && int64(len(b)) > c.rate/50 {
		b = b[:max(c.rate/50, 1)]
	}
	n, err := c.ReadCloser.Read(b)
	c.add(int64(n))
	if c.rate > 0 && n > 0 {
		time.Sleep(time.Duration(int64(n) * int64(time.Second) / c.rate))
	}
	return n, err
}
