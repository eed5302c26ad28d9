package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/imsd/health"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// alertReceiver is a vendor's webhook receiver: it checks every alert's
// signature (HMAC-SHA256 of the timestamp and body, the timestamp within
// five minutes) and keeps those that verify.
type alertReceiver struct {
	t      *testing.T
	secret []byte
	mu     sync.Mutex
	got    []health.AlertBody
}

func (r *alertReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	if err := health.Verify(r.secret, body, req.Header.Get(health.SignatureHeader), time.Now(), 5*time.Minute); err != nil {
		r.t.Errorf("alert signature: %v", err)
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var a health.AlertBody
	if err := json.Unmarshal(body, &a); err != nil {
		r.t.Errorf("alert body %q: %v", body, err)
	}
	r.mu.Lock()
	r.got = append(r.got, a)
	r.mu.Unlock()
}

// healths is what the receiver got, as "install:health" in order.
func (r *alertReceiver) healths() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, a := range r.got {
		out = append(out, a.Install+":"+a.Health)
	}
	return strings.Join(out, ",")
}

// startAlertingIMS starts imsd with a signed webhook sink: offline after
// 3s silent, alerts after 1s held, one page of a problem per hour.
func startAlertingIMS(t *testing.T) (*cluster.IMS, *alertReceiver) {
	rcv := &alertReceiver{t: t, secret: []byte("e2e webhook shared secret")}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	secretFile := filepath.Join(t.TempDir(), "webhook.secret")
	if err := os.WriteFile(secretFile, append(rcv.secret, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	o := fast
	o.AgentOfflineAfter, o.AgentHealthGrace, o.AlertDelay, o.AlertDedup = 3*time.Second, time.Second, time.Second, time.Hour
	o.AlertWebhookURL, o.AlertWebhookSecretFile = srv.URL+"/alerts", secretFile
	o.HealthInterval, o.AlertRetryMin = 100*time.Millisecond, 100*time.Millisecond
	return cluster.StartIMS(t, o), rcv
}

func agentHealth(t *testing.T, ims *cluster.IMS, install string) *imsv1.AgentStatus {
	t.Helper()
	r, err := ims.Admin().GetInstall(context.Background(), connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: install}))
	if err != nil {
		t.Fatal(err)
	}
	return r.Msg.Install.Agent
}

// An agent stopped for longer than the offline threshold produces exactly
// one alert on the webhook (its signature verified), and one recovery
// alert when it comes back; byoc install get says offline, since when and
// why.
func TestStoppedAgentAlertsOnceAndRecovers(t *testing.T) {
	skipShort(t)
	ims, rcv := startAlertingIMS(t)
	_, token := cluster.NewInstall(t, ims.Admin(), "shop", "acme")
	dir := filepath.Join(t.TempDir(), "agent")
	agent := cluster.StartAgent(t, ims.URL(), token, dir)
	waitConnected(t, ims, "acme")
	agent.Stop()

	cluster.Eventually(t, 30*time.Second, "the offline alert", func() bool { return rcv.healths() != "" })
	if got := rcv.healths(); got != "acme:offline" {
		t.Fatalf("alerts = %s, want one offline alert", got)
	}
	a := rcv.got[0]
	if a.Reason != "no heartbeat for more than 3s" || a.Recovered || a.Previous != "healthy" || !strings.Contains(a.Description, "is offline") {
		t.Fatalf("alert = %+v", a)
	}
	if st := agentHealth(t, ims, "acme"); st.Health != "offline" || st.HealthReason != "no heartbeat for more than 3s" || st.HealthTime == nil {
		t.Fatalf("agent status = %+v", st)
	}
	// Prometheus sees it too, with the install's labels.
	res, err := http.Get(ims.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{
		`byoc_agent_up{agent="` + a.AgentID + `",install="acme",install_id="` + a.InstallID + `"} 0`,
		`byoc_agent_health_state{agent="` + a.AgentID + `",install="acme",install_id="` + a.InstallID + `",state="offline"} 1`,
		`byoc_agent_health_state{agent="` + a.AgentID + `",install="acme",install_id="` + a.InstallID + `",state="healthy"} 0`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	out := cluster.NewCLI(t, ims).Run(0, "install", "get", "acme")
	if !lineWith(out, "Agent health", "offline since", "no heartbeat for more than 3s") {
		t.Fatalf("byoc install get:\n%s", out)
	}

	cluster.StartAgent(t, ims.URL(), "", dir)
	cluster.Eventually(t, 30*time.Second, "the recovery alert", func() bool { return strings.Count(rcv.healths(), ",") >= 1 })
	if got := rcv.healths(); got != "acme:offline,acme:healthy" {
		t.Fatalf("alerts = %s, want offline then healthy", got)
	}
	if r := rcv.got[1]; !r.Recovered || r.Previous != "offline" {
		t.Fatalf("recovery = %+v", r)
	}
	// Exactly one of each, recorded once in the outbox, delivered.
	waitSweeps(t, ims, 3)
	all, err := ims.Server.Store().ListAlertOutbox(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].DeliveredAt.IsZero() || all[1].DeliveredAt.IsZero() || rcv.healths() != "acme:offline,acme:healthy" {
		t.Fatalf("outbox = %+v; alerts %s", all, rcv.healths())
	}
}

// A flapping agent pages once per de-duplication window: offline (paged),
// back (the recovery), offline again for longer than the delay (not paged:
// within the hour), back (no recovery either: nobody was paged for it).
func TestFlappingAgentPagesOnce(t *testing.T) {
	skipShort(t)
	ims, rcv := startAlertingIMS(t)
	_, token := cluster.NewInstall(t, ims.Admin(), "shop", "acme")
	dir := filepath.Join(t.TempDir(), "agent")
	agent := cluster.StartAgent(t, ims.URL(), token, dir)
	waitConnected(t, ims, "acme")
	for i := range 3 {
		agent.Stop()
		cluster.Eventually(t, 30*time.Second, "the agent offline", func() bool { return agentHealth(t, ims, "acme").Health == "offline" })
		if i == 0 {
			cluster.Eventually(t, 30*time.Second, "the first page", func() bool { return rcv.healths() != "" })
		} else {
			// Held past the delay, and swept since.
			since := agentHealth(t, ims, "acme").HealthTime.AsTime()
			cluster.Eventually(t, 30*time.Second, "the offline spell to outlast the alert delay", func() bool {
				return time.Since(since) > 2*time.Second
			})
			waitSweeps(t, ims, 3)
		}
		agent = cluster.StartAgent(t, ims.URL(), "", dir)
		cluster.Eventually(t, 30*time.Second, "the agent healthy", func() bool { return agentHealth(t, ims, "acme").Health == "healthy" })
		if i == 0 {
			cluster.Eventually(t, 30*time.Second, "the recovery", func() bool { return strings.Contains(rcv.healths(), "healthy") })
		}
	}
	since := agentHealth(t, ims, "acme").HealthTime.AsTime()
	cluster.Eventually(t, 30*time.Second, "the last recovery to outlast the alert delay", func() bool { return time.Since(since) > 2*time.Second })
	waitSweeps(t, ims, 3)
	if got := rcv.healths(); got != "acme:offline,acme:healthy" {
		t.Fatalf("alerts of three flaps = %s, want one page and its recovery", got)
	}
}

// waitSweeps waits until imsd's health sweeper has ended n more sweeps.
func waitSweeps(t *testing.T, ims *cluster.IMS, n uint64) {
	t.Helper()
	from := ims.Server.HealthSweeps()
	cluster.Eventually(t, 10*time.Second, "health sweeps", func() bool { return ims.Server.HealthSweeps() >= from+n })
}
