package agent

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/agentd/pluginhost"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// A compromised imsd signs whatever it likes, a job's id included. The
// id names the job's workspace (removed before and after the run), its
// log's local copy and its saved plan's directory, so an id that is a
// path ("../../victim") would have the agent remove and create
// directories outside its own and hand them to the vendor's plugin; one
// with an escape sequence would reach the customer's terminal through
// agentd egress list. The agent refuses such an assignment before it
// acks it (so never runs it), whatever signs it, and acks the next good
// one.
func TestAgentRefusesAJobIDThatIsNotAnID(t *testing.T) {
	for _, id := range []string{"../../victim", "job/../../x", "..", "job_\x1b]52;c;cm0gLXJmIC8=\a", strings.Repeat("j", 129), ""} {
		t.Run(strings.NewReplacer("/", "_", "\x1b", "ESC", "\a", "BEL").Replace(id[:min(len(id), 20)]), func(t *testing.T) {
			rr := &runRecorder{release: make(chan struct{})}
			defer close(rr.release)
			f := &fakeIMS{}
			startFake(t, f, rr)
			fs := <-f.streams
			fs.down <- f.assign(id, 7, "ins_1")
			fs.down <- f.assign("job_ok", 8, "ins_1")
			first := fs.next(t)
			if id != "" {
				if r := first.GetResult(); r == nil || r.JobId != id || !strings.Contains(r.Error, "is not an id") {
					t.Fatalf("the first write is %v, want the refusal of %q", first, id)
				}
				first = fs.next(t)
			}
			if ack := first.GetAck(); ack == nil || ack.JobId != "job_ok" {
				t.Fatalf("the next write is %v, want the ack of job_ok", first)
			}
		})
	}
}

// The plugin runner refuses such an id too, on its own, before the id
// names a directory: the victim beside its work root is untouched.
func TestPluginRunnerRefusesAJobIDThatIsAPath(t *testing.T) {
	root := t.TempDir()
	victim := filepath.Join(root, "victim-1")
	if err := os.MkdirAll(victim, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(victim, "keep"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A loader that knows no type: without the check, the job would fail
	// at its plugin's start, after its workspace was cleared and made.
	r := &PluginRunner{Loader: &pluginhost.Loader{}, WorkRoot: filepath.Join(root, "jobs"), StateRoot: filepath.Join(root, "components"),
		LogRoot: filepath.Join(root, "logs")}
	t.Cleanup(func() { r.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := r.Run(ctx, Job{ID: "../victim", Attempt: 1, ComponentType: "action", Operation: "apply", Timeout: time.Minute}, func(int32, string) {})
	if _, err := os.Stat(filepath.Join(victim, "keep")); err != nil {
		t.Errorf("the directory beside the work root: %v", err)
	}
	if !strings.Contains(out.Error, "is not an id") {
		t.Fatalf("outcome %+v, want the id refused", out)
	}
}

// imsd decides how large a message it sends; the agent reads at most
// Config.MaxReceiveBytes of one (MaxReceiveBytes by default): a larger
// one ends the stream unread, so its job is never acked, and the agent
// connects again.
func TestAgentReadsNoMessageOverItsBound(t *testing.T) {
	rr := &runRecorder{release: make(chan struct{})}
	defer close(rr.release)
	f := &fakeIMS{}
	startFakeWith(t, f, rr, t.TempDir(), nil, func(c *Config) { c.MaxReceiveBytes = 64 << 10 })
	fs := <-f.streams
	big := f.assign("job_big", 7, "ins_1")
	big.GetAssignment().Config = mustStruct(map[string]any{"steps": []any{map[string]any{"run": "echo " + strings.Repeat("x", 200<<10)}}})
	f.sign(big.GetAssignment(), f.key, time.Now().Add(time.Minute))
	fs.down <- big
	deadline := time.After(10 * time.Second)
	for ended := false; !ended; {
		select {
		case m := <-fs.up:
			if m.GetAck() != nil {
				t.Fatalf("the agent acked a message over its bound: %v", m.GetAck())
			}
		case <-fs.done:
			ended = true
		case <-deadline:
			t.Fatal("the stream did not end")
		}
	}
	select {
	case fs2 := <-f.streams:
		fs2.down <- f.assign("job_ok", 8, "ins_1")
		if ack := fs2.next(t).GetAck(); ack == nil || ack.JobId != "job_ok" {
			t.Fatalf("after reconnecting, want the ack of job_ok, got %v", ack)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not connect again")
	}
	if started, _ := rr.get(); len(started) > 0 && started[0] == "job_big" {
		t.Fatalf("ran %q", started)
	}
}

// A compromised imsd signs as many update offers as it likes, with any
// id. One whose id is not an id (agentd keeps it in the state dir and
// shows it in agentd update status) is ignored; and at most
// maxOffersInFlight wait for the agent's decision at once (it decides
// one at a time): more are ignored, not queued, until those end.
func TestAgentBoundsUpdateOffers(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	now := time.Unix(1_800_000_000, 0)
	handed := make(chan string, 100)
	release := make(chan struct{})
	a := &Agent{cfg: Config{Now: func() time.Time { return now },
		OnUpdateOffer: func(_ context.Context, offerID, _ string, _ bool) {
			handed <- offerID
			<-release
		}},
		id:   identity.Identity{InstallID: "in1", AgentID: "ag1"},
		keys: map[string]ed25519.PublicKey{agentproto.KeyID(pub): pub}, log: slog.New(slog.DiscardHandler)}
	offer := func(id string) *agentv1.UpdateOffer {
		c := agentproto.UpdateOfferClaims{KeyID: agentproto.KeyID(pub), InstallID: "in1", AgentID: "ag1", OfferID: id,
			Release: "oci://r.example/byoc/agent@sha256:00", Expires: now.Add(time.Hour)}
		return &agentv1.UpdateOffer{OfferId: id, Release: c.Release, KeyId: c.KeyID, ExpireUnixMs: c.Expires.UnixMilli(),
			Signature: agentproto.SignUpdateOffer(priv, &c)}
	}
	a.updateOffer(t.Context(), offer("uo_\x1b]0;pwned\a"))
	a.updateOffer(t.Context(), offer("../../uo"))
	for i := range 50 {
		a.updateOffer(t.Context(), offer(fmt.Sprintf("uo_%d", i)))
	}
	var got []string
	for range maxOffersInFlight {
		select {
		case id := <-handed:
			got = append(got, id)
		case <-time.After(10 * time.Second):
			t.Fatalf("handed on %q, want %d offers", got, maxOffersInFlight)
		}
	}
	select {
	case id := <-handed:
		t.Fatalf("handed on %s past the %d in flight (and %q)", id, maxOffersInFlight, got)
	case <-time.After(100 * time.Millisecond):
	}
	for _, id := range got {
		if !strings.HasPrefix(id, "uo_") || strings.ContainsAny(id, "\x1b/") {
			t.Fatalf("handed on offer %q", id)
		}
	}
	// Once those are decided, an offer is taken again.
	close(release)
	eventually(t, "the offers in flight to end", func() bool { return a.offersInFlight.Load() == 0 })
	a.updateOffer(t.Context(), offer("uo_next"))
	select {
	case id := <-handed:
		if id != "uo_next" {
			t.Fatalf("handed on %s, want uo_next", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an offer after the others ended was not handed on")
	}
}
