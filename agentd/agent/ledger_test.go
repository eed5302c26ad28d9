package agent

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/agentd/ledger"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

type loggingRunner struct{}

func (loggingRunner) Run(_ context.Context, job Job, log func(int32, string)) Outcome {
	log(1, "applied "+job.ID)
	return Outcome{Outcome: agentv1.Outcome_OUTCOME_SUCCEEDED, Outputs: map[string]string{"url": "db"}}
}

// Every message imsd receives from the agent (the hello, heartbeats, the
// ack, logs and result of a job) is in the egress ledger with its kind,
// job, size and the SHA-256 of what imsd got; logs and outputs in full
// only as the customer asked.
func TestLedgerListsEveryMessageIMSDGot(t *testing.T) {
	var mu sync.Mutex
	var got []*agentv1.ConnectRequest
	f := &fakeIMS{onHello: func(h *agentv1.Hello) {
		mu.Lock()
		got = append(got, &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Hello{Hello: h}})
		mu.Unlock()
	}}
	url := serveFake(t, f)
	dir := t.TempDir()
	key, _ := identity.NewKey()
	if err := identity.Save(dir, identity.Identity{AgentID: "agt_1", InstallID: "ins_1", IMSURL: url, PrivateKey: key,
		IMSDKeys: []ed25519.PublicKey{f.key.Public().(ed25519.PublicKey)}}); err != nil {
		t.Fatal(err)
	}
	f.agentKey.Store(key.Public().(ed25519.PublicKey))
	led, err := ledger.Open(dir, ledger.Options{Content: map[string]bool{ledger.ContentOutputs: true}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(context.Background(), Config{IMSURL: url, StateDir: dir, Runner: loggingRunner{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		BackoffMin: 20 * time.Millisecond, BackoffMax: 50 * time.Millisecond, FlushInterval: 5 * time.Millisecond, Ledger: led})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	fs := <-f.streams
	fs.down <- f.assign("job_a", 7, "ins_1")
	accept := func(id uint64) {
		fs.down <- &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Accepted{Accepted: &agentv1.WriteAccepted{WriteId: id}}}
	}
	deadline := time.After(20 * time.Second)
	var heartbeats int
	for result := false; !result || heartbeats == 0; {
		select {
		case m := <-fs.up:
			mu.Lock()
			got = append(got, m)
			mu.Unlock()
			switch v := m.Msg.(type) {
			case *agentv1.ConnectRequest_Ack:
				accept(v.Ack.WriteId)
			case *agentv1.ConnectRequest_Logs:
				accept(v.Logs.WriteId)
			case *agentv1.ConnectRequest_Result:
				accept(v.Result.WriteId)
				result = true
			case *agentv1.ConnectRequest_Heartbeat:
				heartbeats++
			}
		case <-deadline:
			t.Fatal("no result from the agent")
		}
	}
	cancel()
	<-done
	if err := led.Close(); err != nil {
		t.Fatal(err)
	}
	es, err := ledger.Read(dir, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	bySum := map[string]ledger.Entry{}
	for _, e := range es {
		bySum[e.SHA256] = e
	}
	mu.Lock()
	defer mu.Unlock()
	kinds := map[string]bool{}
	for _, m := range got {
		kind, job, inner := ledger.Describe(m)
		b, _ := proto.Marshal(inner)
		if _, hello := m.Msg.(*agentv1.ConnectRequest_Hello); !hello {
			b, _ = proto.Marshal(m)
		}
		s := sha256.Sum256(b)
		e, ok := bySum[hex.EncodeToString(s[:])]
		if !ok || e.Kind != kind || e.Job != job || e.Size != len(b) || e.Install != "ins_1" {
			t.Errorf("imsd got a %s of job %q (%d bytes) that the ledger does not list as such: %+v", kind, job, len(b), e)
		}
		if kind == "result" && string(e.Content) != `{"outputs":{"url":"db"}}` {
			t.Errorf("result content %s, want the outputs", e.Content)
		}
		if kind == "logs" && e.Content != nil {
			t.Errorf("logs content %s kept though the customer turned on only outputs", e.Content)
		}
		kinds[kind] = true
	}
	for _, k := range []string{"hello", "heartbeat", "ack", "logs", "result"} {
		if !kinds[k] {
			t.Errorf("no %s seen", k)
		}
	}
}
