package cluster

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

// TestBalancerProcessesSharePort starts two balancer processes on one
// port (SO_REUSEPORT) in front of two backends, and sends 64 requests,
// each on a new connection: the kernel spreads them across both
// processes, each process round-robins across both backends, and every
// request is answered.
func TestBalancerProcessesSharePort(t *testing.T) {
	var backends []string
	for _, name := range []string{"a", "b"} {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, name)
		}))
		t.Cleanup(s.Close)
		backends = append(backends, strings.TrimPrefix(s.URL, "http://"))
	}
	g := StartBalancerProcesses(t, 2, backends...)
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	const n = 64
	got := map[string]int{}
	for range n {
		r, err := c.Get(g.URL() + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		got[string(b)]++
	}
	if got["a"] == 0 || got["b"] == 0 || got["a"]+got["b"] != n {
		t.Fatalf("answers by backend: %v, want both of %d", got, n)
	}
	st, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for i, s := range st {
		routed := 0
		for _, v := range s.Routed {
			routed += v
		}
		if routed == 0 {
			t.Errorf("balancer process %d routed no connection: %+v (the kernel spreads a shared port's connections)", i, st)
		}
		total += routed
	}
	if total != n {
		t.Errorf("routed %d connections in all, want %d: %+v", total, n, st)
	}
	if len(g.PIDs()) != 2 || g.PIDs()[0] == g.PIDs()[1] {
		t.Errorf("pids %v", g.PIDs())
	}
}
