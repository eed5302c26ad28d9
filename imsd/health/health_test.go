package health

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/store"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// clock is a fake clock the tests move by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// receiver is a test webhook receiver: it verifies every signature and
// keeps the alerts; fail makes it answer 503 that many times first.
type receiver struct {
	t      *testing.T
	secret []byte
	clock  *clock
	mu     sync.Mutex
	got    []AlertBody
	slack  []string
	fail   int
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail > 0 {
		r.fail--
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return
	}
	if req.URL.Path == "/slack" {
		var m map[string]string
		if err := json.Unmarshal(body, &m); err != nil {
			r.t.Errorf("slack body %q: %v", body, err)
		}
		r.slack = append(r.slack, m["text"])
		return
	}
	if err := Verify(r.secret, body, req.Header.Get(SignatureHeader), r.clock.Now(), 5*time.Minute); err != nil {
		r.t.Errorf("webhook signature: %v", err)
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var a AlertBody
	if err := json.Unmarshal(body, &a); err != nil {
		r.t.Errorf("webhook body %q: %v", body, err)
	}
	if req.Header.Get(AlertIDHeader) != a.ID {
		r.t.Errorf("alert id header %q, body %q", req.Header.Get(AlertIDHeader), a.ID)
	}
	r.got = append(r.got, a)
}

func (r *receiver) alerts() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, a := range r.got {
		out = append(out, a.AgentID+":"+a.Health)
	}
	return out
}

type fixture struct {
	t   *testing.T
	ctx context.Context
	st  *store.Store
	clk *clock
	rcv *receiver
	cfg Config
	m   *Monitor
}

func newFixture(t *testing.T) *fixture {
	ctx := t.Context()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "imsd.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clk := &clock{now: t0}
	rcv := &receiver{t: t, secret: []byte("a shared secret of the vendor"), clock: clk}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	f := &fixture{t: t, ctx: ctx, st: st, clk: clk, rcv: rcv}
	f.cfg = Config{OfflineAfter: 2 * time.Minute, Grace: time.Minute,
		AlertDelay: 30 * time.Second, AlertDedup: time.Hour, RetryMin: 10 * time.Second,
		Sinks: []Sink{&Webhook{URL: srv.URL + "/hook", Secret: rcv.secret}, &Slack{URL: srv.URL + "/slack"}}, Now: clk.Now}
	f.m = New(st, f.cfg)
	if err := st.CreateApp(ctx, store.App{ID: "app-1", Name: "shop", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) enrol(install, agent string) {
	f.t.Helper()
	tok := store.EnrollmentToken{Hash: "h-" + agent, ExpiresAt: t0.Add(time.Hour), CreatedAt: t0}
	in := store.Install{ID: "inst-" + install, AppID: "app-1", Name: install, CreatedAt: t0, Labels: map[string]string{"customer": install}}
	if err := f.st.CreateInstall(f.ctx, in, tok); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.st.Enroll(f.ctx, "h-"+agent, store.Agent{ID: agent, PublicKey: []byte("k")}, f.clk.Now()); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) connect(agent string) {
	f.t.Helper()
	if err := f.st.AgentConnected(f.ctx, agent, "v1", f.clk.Now()); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) touch(agent string) {
	f.t.Helper()
	if err := f.st.TouchAgent(f.ctx, agent, f.clk.Now()); err != nil {
		f.t.Fatal(err)
	}
}

// step sweeps and delivers once.
func (f *fixture) step() {
	f.t.Helper()
	if err := f.m.Sweep(f.ctx); err != nil {
		f.t.Fatal(err)
	}
	if err := f.m.Deliver(f.ctx); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) health(agent string) (store.Health, string) {
	f.t.Helper()
	a, err := f.st.GetAgent(f.ctx, agent)
	if err != nil {
		f.t.Fatal(err)
	}
	return a.Health, a.HealthReason
}

func (f *fixture) wantAlerts(what string, want ...string) {
	f.t.Helper()
	if got := f.rcv.alerts(); strings.Join(got, ",") != strings.Join(want, ",") {
		f.t.Fatalf("%s: webhook alerts = %v, want %v", what, got, want)
	}
}

// TestOfflineAlertOnceAndRecovery: an agent silent past the offline
// threshold is alerted once, after the delay, signed; its return is one
// recovery alert; a flap within the de-dup window pages nobody; an agent
// still offline when the window has passed is alerted again.
func TestOfflineAlertOnceAndRecovery(t *testing.T) {
	f := newFixture(t)
	f.enrol("acme", "ag-1")
	f.connect("ag-1")
	f.step()
	if h, _ := f.health("ag-1"); h != store.AgentHealthy {
		t.Fatalf("after connecting: %s", h)
	}
	f.clk.Add(2*time.Minute + time.Second)
	f.step()
	h, why := f.health("ag-1")
	if h != store.AgentOffline || why != "no heartbeat for more than 2m0s" {
		t.Fatalf("silent past the threshold: %s (%s)", h, why)
	}
	f.wantAlerts("before the delay")
	f.clk.Add(29 * time.Second)
	f.step()
	f.wantAlerts("just before the delay")
	f.clk.Add(time.Second)
	f.step()
	f.step() // a second sweep alerts nothing more
	f.wantAlerts("after the delay", "ag-1:offline")
	if len(f.rcv.slack) != 1 || !strings.Contains(f.rcv.slack[0], "agent ag-1 of install acme is offline") {
		t.Fatalf("slack = %q", f.rcv.slack)
	}
	// The webhook's body carries the install's labels, to route on.
	f.rcv.mu.Lock()
	labels := f.rcv.got[0].Labels
	f.rcv.mu.Unlock()
	if labels["customer"] != "acme" {
		t.Fatalf("the alert's labels = %v, want customer=acme", labels)
	}

	// It comes back: healthy at once, the recovery after the delay.
	f.clk.Add(time.Minute)
	f.connect("ag-1")
	f.step()
	if h, _ := f.health("ag-1"); h != store.AgentHealthy {
		t.Fatalf("back: %s", h)
	}
	f.clk.Add(30 * time.Second)
	f.step()
	f.wantAlerts("recovered", "ag-1:offline", "ag-1:healthy")
	if got := f.rcv.got[1]; !got.Recovered || got.Previous != "offline" {
		t.Fatalf("recovery = %+v", got)
	}

	// It flaps: offline again within the hour, then back: no page.
	f.clk.Add(2*time.Minute + time.Second)
	f.step()
	f.clk.Add(time.Minute)
	f.step()
	if h, _ := f.health("ag-1"); h != store.AgentOffline {
		t.Fatalf("flapped: %s", h)
	}
	f.connect("ag-1")
	f.step()
	f.clk.Add(time.Minute)
	f.step()
	f.wantAlerts("a flap within the window", "ag-1:offline", "ag-1:healthy")

	// Offline again and still so when the window has passed: one page.
	f.clk.Add(2*time.Minute + time.Second)
	f.step()
	f.wantAlerts("offline within the window", "ag-1:offline", "ag-1:healthy")
	f.clk.Add(time.Hour)
	f.step()
	f.step()
	f.wantAlerts("offline past the window", "ag-1:offline", "ag-1:healthy", "ag-1:offline")
}

// TestFlapShorterThanDelay: offline spells shorter than the delay page
// nobody, however many.
func TestFlapShorterThanDelay(t *testing.T) {
	f := newFixture(t)
	f.enrol("acme", "ag-1")
	f.connect("ag-1")
	for range 5 {
		f.clk.Add(2*time.Minute + time.Second)
		f.step()
		if h, _ := f.health("ag-1"); h != store.AgentOffline {
			t.Fatalf("silent: %s", h)
		}
		f.clk.Add(10 * time.Second)
		f.connect("ag-1")
		f.step()
	}
	f.clk.Add(20 * time.Second)
	f.step()
	f.wantAlerts("flaps shorter than the delay")
	// The audit chain still has every change.
	evs, err := f.st.ListAuditEvents(f.ctx, store.AuditFilter{Chain: "inst-acme", OneChain: true})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs {
		if e.Kind == "agent.health_changed" {
			n++
		}
	}
	if n != 10 {
		t.Fatalf("agent.health_changed events = %d, want 10", n)
	}
}

// TestNoAlertBeforeFirstHeartbeat: an agent that never connected turns
// offline after its grace, but nobody is paged for it.
func TestNoAlertBeforeFirstHeartbeat(t *testing.T) {
	f := newFixture(t)
	f.enrol("acme", "ag-1")
	f.clk.Add(time.Minute)
	f.step()
	if h, _ := f.health("ag-1"); h != store.AgentHealthy {
		t.Fatalf("within its grace: %s", h)
	}
	f.clk.Add(2 * time.Minute)
	f.step()
	if h, why := f.health("ag-1"); h != store.AgentOffline || why != "never connected since its enrolment" {
		t.Fatalf("never connected: %s (%s)", h, why)
	}
	f.clk.Add(time.Hour)
	f.step()
	f.wantAlerts("never connected")
}

// TestDegraded: late heartbeats, failing jobs and a full disk make an
// agent degraded, but not within its grace after a reconnection.
func TestDegraded(t *testing.T) {
	f := newFixture(t)
	f.enrol("acme", "ag-1")
	f.connect("ag-1")
	if err := f.st.SetAgentCondition(f.ctx, "ag-1", store.AgentCondition{DiskUsedPercent: 95, FailedInRow: 4}, f.clk.Now()); err != nil {
		t.Fatal(err)
	}
	f.step()
	if h, _ := f.health("ag-1"); h != store.AgentHealthy {
		t.Fatalf("within the grace: %s", h)
	}
	f.clk.Add(55 * time.Second)
	f.touch("ag-1")
	f.clk.Add(6 * time.Second)
	f.step()
	h, why := f.health("ag-1")
	if h != store.AgentDegraded || why != "its last 4 jobs failed; disk 95% full" {
		t.Fatalf("after the grace: %s (%s)", h, why)
	}
	if err := f.st.RecordLateHeartbeat(f.ctx, "ag-1", f.clk.Now()); err != nil {
		t.Fatal(err)
	}
	f.touch("ag-1")
	f.clk.Add(50 * time.Second)
	f.step()
	if _, why := f.health("ag-1"); why != "heartbeats late (one within the last 5m0s); its last 4 jobs failed; disk 95% full" {
		t.Fatalf("late too: %s", why)
	}
	f.wantAlerts("degraded", "ag-1:degraded")
	// Worse within the window: offline is alerted (not a flap).
	f.clk.Add(80 * time.Second)
	f.step()
	if h, _ := f.health("ag-1"); h != store.AgentOffline {
		t.Fatalf("silent: %s", h)
	}
	f.clk.Add(30 * time.Second)
	f.step()
	f.wantAlerts("worse", "ag-1:degraded", "ag-1:offline")
}

// TestRetriesAndTwoReplicas: a receiver that fails gets the alert again
// after the retry delay; two replicas sweeping and delivering at once
// record and send each alert once.
func TestRetriesAndTwoReplicas(t *testing.T) {
	f := newFixture(t)
	second := New(f.st, f.cfg)
	f.enrol("acme", "ag-1")
	f.enrol("globex", "ag-2")
	f.connect("ag-1")
	f.connect("ag-2")
	f.rcv.fail = 1
	f.clk.Add(3 * time.Minute)
	var wg sync.WaitGroup
	for _, m := range []*Monitor{f.m, second} {
		wg.Go(func() {
			for range 3 {
				if err := m.Sweep(f.ctx); err != nil {
					t.Error(err)
				}
				if err := m.Deliver(f.ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	f.clk.Add(time.Minute)
	f.step()
	f.clk.Add(10 * time.Second)
	f.step()
	got := f.rcv.alerts()
	if strings.Join(got, ",") != "ag-1:offline,ag-2:offline" && strings.Join(got, ",") != "ag-2:offline,ag-1:offline" {
		t.Fatalf("alerts = %v, want one per agent", got)
	}
	all, err := f.st.ListAlertOutbox(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	attempts := 0
	for _, o := range all {
		if o.DeliveredAt.IsZero() {
			t.Fatalf("undelivered: %+v", o)
		}
		attempts += o.Attempts
	}
	if len(all) != 4 || attempts != 5 {
		t.Fatalf("outbox = %d rows, %d attempts; want 4 and 5 (one retry)", len(all), attempts)
	}
}

func TestVerify(t *testing.T) {
	secret, body := []byte("0123456789abcdef"), []byte(`{"id":"al-1"}`)
	h := Sign(secret, body, t0)
	if err := Verify(secret, body, h, t0.Add(time.Minute), 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		secret, body []byte
		at           time.Time
		want         string
	}{
		"replayed":    {secret, body, t0.Add(6 * time.Minute), "a replay"},
		"other body":  {secret, []byte(`{"id":"al-2"}`), t0, "does not match"},
		"other key":   {[]byte("fedcba9876543210"), body, t0, "does not match"},
		"from future": {secret, body, t0.Add(-6 * time.Minute), "a replay"},
	} {
		if err := Verify(c.secret, c.body, h, c.at, 5*time.Minute); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
	if err := Verify(secret, body, "v1=00", t0, time.Minute); err == nil {
		t.Error("no timestamp: accepted")
	}
}

func TestSlackURLNotInErrors(t *testing.T) {
	s := &Slack{URL: "http://127.0.0.1:1/services/T000/B000/SECRET"}
	err := s.Deliver(t.Context(), []byte(`{"id":"x","health":"offline"}`), t0)
	if err == nil || strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("err = %v", err)
	}
}
