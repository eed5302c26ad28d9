package egress_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/egress"
)

func TestPolicy(t *testing.T) {
	custom := &egress.Policy{
		Deny:       []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")},
		Exceptions: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:5000")},
	}
	allowOnly := &egress.Policy{
		// An allow entry cannot re-open the always-denied set.
		Allow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("::/0")},
		Ports: []uint16{443},
	}
	tests := []struct {
		policy *egress.Policy
		addr   string
		ok     bool
		rule   string
	}{
		{nil, "169.254.169.254:80", false, "instance metadata service (169.254.169.254)"},
		{nil, "[fd00:ec2::254]:80", false, "instance metadata service (fd00:ec2::254)"},
		{nil, "[::ffff:169.254.169.254]:80", false, "instance metadata service (169.254.169.254)"},
		{nil, "169.254.170.2:80", false, "container credentials endpoint"},
		{nil, "169.254.170.23:80", false, "EKS pod identity"},
		{nil, "[fd00:ec2::23]:80", false, "EKS pod identity"},
		{nil, "169.254.1.1:80", false, "link-local (169.254.0.0/16)"},
		{nil, "127.0.0.2:8080", false, "loopback (127.0.0.0/8)"},
		{nil, "[::1]:8080", false, "loopback (::1)"},
		{nil, "[::ffff:127.0.0.1]:8080", false, "loopback (127.0.0.0/8)"},
		{nil, "0.0.0.0:80", false, "unspecified"},
		{nil, "[::]:80", false, "unspecified"},
		{nil, "[fe80::1%lo]:80", false, "link-local (fe80::/10)"},
		{nil, "224.0.0.1:80", false, "multicast"},
		{nil, "[ff02::1]:80", false, "multicast"},
		{nil, "[64:ff9b::a9fe:a9fe]:80", false, "instance metadata service (169.254.169.254) embedded in 64:ff9b::/96"},
		{nil, "[::7f00:1]:80", false, "loopback (127.0.0.0/8) embedded in ::/96"},
		{nil, "[::ffff:0:a9fe:a9fe]:80", false, "instance metadata service (169.254.169.254) embedded in ::ffff:0:0:0/96"},
		{nil, "[2002:a9fe:a9fe::1]:80", false, "instance metadata service (169.254.169.254) embedded in 2002::/16"},
		{nil, "[2002:cb00:7107::1]:80", true, ""},
		{nil, "203.0.113.7:443", true, ""},
		{nil, "10.1.2.3:5432", true, ""},
		{nil, "[2001:db8::1]:443", true, ""},
		{custom, "10.9.1.1:443", false, "--sandbox-egress-deny 10.9.0.0/16"},
		{custom, "127.0.0.1:5000", true, ""},
		{custom, "[::ffff:127.0.0.1]:5000", true, ""},
		{custom, "127.0.0.1:5001", false, "loopback"},
		{allowOnly, "10.1.1.1:443", true, ""},
		{allowOnly, "10.1.1.1:80", false, "port not in --sandbox-egress-port"},
		{allowOnly, "192.168.1.1:443", false, "not in --sandbox-egress-allow"},
		{allowOnly, "169.254.169.254:443", false, "always denied: instance metadata"},
		{allowOnly, "[::1]:443", false, "always denied: loopback"},
	}
	for _, tt := range tests {
		ok, rule := tt.policy.Check(netip.MustParseAddrPort(tt.addr))
		if ok != tt.ok || !strings.Contains(rule, tt.rule) {
			t.Errorf("Check(%s) = %v, %q; want %v, %q", tt.addr, ok, rule, tt.ok, tt.rule)
		}
	}
}

// Go's parser takes no decimal, octal or hexadecimal IPv4 forms: the
// proxy hands such a name to its resolver (as for any name) and checks
// what comes back.
func TestParserForms(t *testing.T) {
	for _, s := range []string{"2130706433", "0177.0.0.1", "0x7f.0.0.1", "127.1", "0x7f000001"} {
		if a, err := netip.ParseAddr(s); err == nil {
			t.Errorf("netip.ParseAddr(%q) = %v: the proxy would check it as an address", s, a)
		}
	}
}

type fakeResolver map[string][]netip.Addr

func (r fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	a, ok := r[host]
	if !ok {
		return nil, fmt.Errorf("no such host %s", host)
	}
	return a, nil
}

// testProxy serves a Proxy on a loopback listener whose dialer sends
// every allowed connection to upstream (a test server standing for the
// world) and records where it was asked to go.
type testProxy struct {
	url     string
	mu      sync.Mutex
	dialed  []string
	denials []egress.Denial
}

func startProxy(t *testing.T, p *egress.Proxy, upstream string) *testProxy {
	t.Helper()
	tp := &testProxy{}
	p.Resolver = fakeResolver{
		"metadata.test": {netip.MustParseAddr("169.254.169.254")},
		"mapped.test":   {netip.MustParseAddr("::ffff:127.0.0.1")},
		"2130706433":    {netip.MustParseAddr("127.0.0.1")}, // as glibc's resolver reads it
		"0177.0.0.1":    {netip.MustParseAddr("127.0.0.1")},
		"world.test":    {netip.MustParseAddr("203.0.113.7")},
		// A name that resolves to loopback first: the proxy dials the
		// address it checked, never the name again.
		"rebind.test": {netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("203.0.113.8")},
	}
	p.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		tp.mu.Lock()
		tp.dialed = append(tp.dialed, addr)
		tp.mu.Unlock()
		return (&net.Dialer{}).DialContext(ctx, network, upstream)
	}
	p.OnDeny = func(d egress.Denial) {
		tp.mu.Lock()
		tp.denials = append(tp.denials, d)
		tp.mu.Unlock()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	tp.url = ln.Addr().String()
	return tp
}

func (tp *testProxy) get() ([]string, []egress.Denial) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return append([]string(nil), tp.dialed...), append([]egress.Denial(nil), tp.denials...)
}

func world(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s %s", r.Host, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// Through each of the proxy's protocols an allowed name is reached and
// the always-denied destinations are refused, however they are named.
func TestProxyProtocols(t *testing.T) {
	srv := world(t)
	tp := startProxy(t, &egress.Proxy{}, srv.Listener.Addr().String())
	for _, scheme := range []string{"http", "socks5"} {
		proxyURL, _ := url.Parse(scheme + "://" + tp.url)
		c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: 10 * time.Second}
		t.Cleanup(c.CloseIdleConnections)
		for _, tt := range []struct {
			url string
			ok  bool
		}{
			{"http://world.test/a", true},
			{"http://rebind.test:81/b", true},
			{"http://metadata.test/latest/meta-data/iam/", false},
			{"http://169.254.169.254/latest/api/token", false},
			{"http://[fd00:ec2::254]/latest", false},
			{"http://[::ffff:169.254.169.254]/x", false},
			{"http://127.0.0.2:8080/", false},
			{"http://[::1]:8080/", false},
			{"http://0.0.0.0/", false},
			{"http://[fe80::1%25lo]/", false},
			{"http://mapped.test/", false},
			{"http://2130706433/", false},
			{"http://0177.0.0.1/", false},
		} {
			resp, err := c.Get(tt.url)
			if tt.ok {
				if err != nil {
					t.Errorf("%s %s: %v", scheme, tt.url, err)
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if !strings.HasPrefix(string(b), "hello ") {
					t.Errorf("%s %s: %d %q", scheme, tt.url, resp.StatusCode, b)
				}
				continue
			}
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "refused by the sandbox's egress policy") {
					t.Errorf("%s %s: %d %q, want 403 refused", scheme, tt.url, resp.StatusCode, b)
				}
			} else if scheme == "http" || !strings.Contains(err.Error(), "not allowed") {
				t.Errorf("%s %s: %v", scheme, tt.url, err)
			}
		}
	}
	// CONNECT, as HTTPS clients use it.
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: tp.url})}}
	defer c.CloseIdleConnections()
	tls := httptest.NewTLSServer(srv.Config.Handler)
	defer tls.Close()
	tp2 := startProxy(t, &egress.Proxy{}, tls.Listener.Addr().String())
	c.Transport.(*http.Transport).Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: tp2.url})
	c.Transport.(*http.Transport).TLSClientConfig = tls.Client().Transport.(*http.Transport).TLSClientConfig
	c.Transport.(*http.Transport).TLSClientConfig.ServerName = "example.com"
	resp, err := c.Get("https://world.test/tls")
	if err != nil {
		t.Fatalf("CONNECT: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "hello world.test /tls" {
		t.Errorf("CONNECT: %q", b)
	}
	if _, err := c.Get("https://metadata.test/"); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("CONNECT to metadata: %v", err)
	}

	dialed, denials := tp.get()
	for _, d := range dialed {
		if d != "203.0.113.7:80" && d != "203.0.113.8:81" {
			t.Errorf("dialed %s", d)
		}
	}
	if len(dialed) == 0 {
		t.Error("nothing dialed")
	}
	var got []string
	for _, d := range denials {
		got = append(got, d.String())
	}
	want := "metadata.test (169.254.169.254:80): always denied: instance metadata service (169.254.169.254)"
	if !strings.Contains(strings.Join(got, "\n"), want) {
		t.Errorf("denials lack %q:\n%s", want, strings.Join(got, "\n"))
	}
}

// A header beyond the limit is refused; a tunnel nobody uses is closed
// after the idle timeout; more clients than MaxConns wait.
func TestProxyLimits(t *testing.T) {
	srv := world(t)
	tp := startProxy(t, &egress.Proxy{MaxHeaderBytes: 1024, IdleTimeout: 200 * time.Millisecond, MaxConns: 2}, srv.Listener.Addr().String())
	conn := func() net.Conn {
		c, err := net.Dial("tcp", tp.url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	c := conn()
	fmt.Fprintf(c, "GET http://world.test/ HTTP/1.1\r\nHost: world.test\r\nX-Big: %s\r\n\r\n", strings.Repeat("a", 2000))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("big header: %v %v", resp, err)
	}
	c.Close()

	tunnel := func() (net.Conn, *bufio.Reader) {
		c := conn()
		fmt.Fprintf(c, "CONNECT world.test:80 HTTP/1.1\r\nHost: world.test:80\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		return c, br
	}
	a, abr := tunnel()
	// Idle: the proxy closes it.
	_ = a.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := abr.ReadByte(); err != io.EOF {
		t.Fatalf("idle tunnel: read %v, want EOF", err)
	}
	a.Close()

	// Two held tunnels (kept busy), a third waits until one ends.
	p1, _ := tunnel()
	p2, _ := tunnel()
	third := conn()
	fmt.Fprintf(third, "CONNECT world.test:80 HTTP/1.1\r\nHost: world.test:80\r\n\r\n")
	_ = third.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, err := third.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("third client served while two are: %d %v", n, err)
	}
	p1.Close()
	_ = third.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err = http.ReadResponse(bufio.NewReader(third), &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("third after one ended: %v %v", resp, err)
	}
	p2.Close()
}

func TestDenials(t *testing.T) {
	var reported []egress.Denial
	d := &egress.Denials{Report: func(x egress.Denial) { reported = append(reported, x) }}
	md := egress.Denial{Host: "169.254.169.254", Addr: netip.MustParseAddrPort("169.254.169.254:80"), Rule: "always denied: x"}
	for range 1000 {
		d.Add(md)
	}
	for i := range egress.MaxReported + 10 {
		d.Add(egress.Denial{Host: fmt.Sprintf("h%d", i), Rule: "r"})
	}
	if len(reported) != egress.MaxReported {
		t.Errorf("reported %d, want %d", len(reported), egress.MaxReported)
	}
	s := d.Summary(3)
	for _, w := range []string{"1060 connections refused", "169.254.169.254:80: always denied: x ×1000", "and 47 more", "11 to destinations beyond the first 50"} {
		if !strings.Contains(s, w) {
			t.Errorf("summary %q lacks %q", s, w)
		}
	}
}

// CredentialEndpoint, what the agent's telemetry scrapes never reach:
// the metadata and credentials services and link-local addresses in every
// form Check knows; loopback and the customer's network are not refused
// (metrics endpoints may be there).
func TestCredentialEndpoint(t *testing.T) {
	for addr, refused := range map[string]bool{
		"169.254.169.254": true, "::ffff:169.254.169.254": true, "64:ff9b::a9fe:a9fe": true, "2002:a9fe:a9fe::1": true,
		"fd00:ec2::254": true, "169.254.170.2": true, "100.100.100.200": true, "169.254.1.1": true, "fe80::1": true,
		"127.0.0.1": false, "::1": false, "10.0.0.5": false, "192.168.1.10": false, "2001:db8::1": false,
	} {
		if got := egress.CredentialEndpoint(netip.MustParseAddr(addr)); (got != "") != refused {
			t.Errorf("CredentialEndpoint(%s) = %q, want refused %v", addr, got, refused)
		}
	}
}
