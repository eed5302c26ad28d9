package server

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/byoc-dev/byoc/imsd/agentwire"
)

// TestH2CListener serves HTTP/2 with prior knowledge and HTTP/1 on one
// port, including an HTTP/1 request shorter than the HTTP/2 preface.
func TestH2CListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Proto)
	}), ReadHeaderTimeout: 5 * time.Second}
	l, err := newH2CListener(ln, srv, h2cOptions{panics: new(atomic.Uint64), log: slog.Default()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	url := "http://" + ln.Addr().String() + "/"

	get := func(t *testing.T, c *http.Client) string {
		t.Helper()
		r, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return string(b)
	}
	t.Run("http2", func(t *testing.T) {
		p := new(http.Protocols)
		p.SetUnencryptedHTTP2(true)
		c := &http.Client{Transport: &http.Transport{Protocols: p}}
		if got := get(t, c); got != "HTTP/2.0" {
			t.Fatalf("got %q, want HTTP/2.0", got)
		}
	})
	t.Run("http1", func(t *testing.T) {
		if got := get(t, &http.Client{Transport: &http.Transport{}}); got != "HTTP/1.1" {
			t.Fatalf("got %q, want HTTP/1.1", got)
		}
	})
	t.Run("short http1", func(t *testing.T) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET / HTTP/1.0\r\n\r\n") // 18 bytes, then wait for the answer
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "HTTP/1.0 200") {
			t.Fatalf("got %q, %v", line, err)
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	l.closeConns(ctx)
	if err := <-done; err != http.ErrServerClosed {
		t.Fatalf("Serve: %v", err)
	}
}

// A client that waits for the server's SETTINGS before its first request
// gets them (from x/net/http2) once the routing gives up waiting for that
// request, and is then served.
func TestH2CClientWaitingForSettings(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Proto)
	}), ReadHeaderTimeout: 5 * time.Second}
	l, err := newH2CListener(ln, srv, h2cOptions{agent: &agentwire.Server{}, panics: new(atomic.Uint64), log: slog.Default()})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		l.closeConns(ctx)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, http2.ClientPreface)
	fr := http2.NewFramer(c, c)
	fr.WriteSettings()
	f, err := fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
		t.Fatalf("got %v, want the server's SETTINGS", f)
	}
}
