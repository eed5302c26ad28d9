package agentapi

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"github.com/byoc-dev/byoc/internal/syncbuf"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/byoc-dev/byoc/imsd/dispatch"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/rpc/agentchannel"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// The agent stream's state machine, driven directly: a Stream of channels,
// a real SQLite store, and a clock the test sets. No HTTP, no polling.

type chanStream struct {
	in     chan *agentv1.ConnectRequest
	out    chan *agentv1.ConnectResponse
	closed chan struct{}
	// agent is the agent's end of the channel once open: what the test
	// puts in in is sealed on its way to imsd, and next opens what imsd
	// sent.
	agent *agentchannel.Channel
}

func newChanStream() *chanStream {
	return &chanStream{in: make(chan *agentv1.ConnectRequest, 16), out: make(chan *agentv1.ConnectResponse, 64), closed: make(chan struct{})}
}

func (c *chanStream) Send(m *agentv1.ConnectResponse) error { c.out <- m; return nil }
func (c *chanStream) Flush() error                          { return nil }
func (c *chanStream) Receive(limit time.Duration) (*agentv1.ConnectRequest, error) {
	var deadline <-chan time.Time
	if limit > 0 {
		t := time.NewTimer(limit)
		defer t.Stop()
		deadline = t.C
	}
	select {
	case m := <-c.in:
		if c.agent != nil && m.GetSealed() == nil {
			return agentchannel.SealRequest(c.agent, m)
		}
		return m, nil
	case <-c.closed:
		return nil, io.EOF
	case <-deadline:
		return nil, fmt.Errorf("receive: %w", os.ErrDeadlineExceeded)
	}
}

// next is the next message imsd sent.
func (c *chanStream) next(t *testing.T) *agentv1.ConnectResponse {
	t.Helper()
	select {
	case m := <-c.out:
		if c.agent != nil && m.GetSealed() != nil {
			o, err := agentchannel.OpenResponse(c.agent, m)
			if err != nil {
				t.Fatal(err)
			}
			return o
		}
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("imsd sent nothing")
		return nil
	}
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

type nopObserver struct{ conflicts int }

func (nopObserver) Connected(int)           {}
func (nopObserver) Picked(time.Duration)    {}
func (nopObserver) Finished(store.JobState) {}
func (o *nopObserver) IdentityConflict()    { o.conflicts++ }

type streamEnv struct {
	svc   *Service
	st    *store.Store
	clk   *clock
	key   ed25519.PrivateKey
	agent string
	obs   *nopObserver
	logs  *syncbuf.Buffer
}

const (
	testLease = 30 * time.Second
	testGrace = 8 * time.Second
)

func newStreamEnv(t *testing.T) *streamEnv {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "byoc.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clk := &clock{now: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(st.CreateApp(ctx, store.App{ID: "app_1", Name: "shop", CreatedAt: clk.Now()}))
	must(st.CreateInstall(ctx, store.Install{ID: "ins_1", AppID: "app_1", Name: "acme", CreatedAt: clk.Now()},
		store.EnrollmentToken{Hash: "h1", ExpiresAt: clk.Now().Add(time.Hour), CreatedAt: clk.Now()}))
	pub, key, _ := ed25519.GenerateKey(nil)
	a, err := st.Enroll(ctx, "h1", store.Agent{ID: "agt_1", PublicKey: pub, Hostname: "h", Version: "v"}, clk.Now())
	must(err)
	obs := &nopObserver{}
	logs := &syncbuf.Buffer{}
	svc := New(st, dispatch.NewHub(), Config{LeaseDuration: testLease, LeaseGrace: testGrace, HeartbeatInterval: 10 * time.Second, HelloTimeout: 5 * time.Second, SigningKey: testService(t).cfg.SigningKey},
		clk.Now, slog.New(slog.NewTextHandler(logs, nil)), obs)
	return &streamEnv{svc: svc, st: st, clk: clk, key: key, agent: a.ID, obs: obs, logs: logs}
}

// open runs Serve on a new stream and answers the challenge.
func (e *streamEnv) open(t *testing.T, instance string, running ...*agentv1.RunningJob) (*chanStream, chan error) {
	t.Helper()
	cs := newChanStream()
	done := make(chan error, 1)
	go func() { done <- e.svc.Serve(context.Background(), cs) }()
	ch := cs.next(t).GetChallenge()
	if ch == nil {
		t.Fatal("imsd did not open with a challenge")
	}
	e.hello(t, cs, ch, &agentv1.Hello{
		AgentId: e.agent, Signature: agentproto.SignChallenge(e.key, e.agent, ch.Nonce), Capacity: 2, Instance: instance, Running: running,
	})
	t.Cleanup(func() {
		select {
		case <-cs.closed:
		default:
			close(cs.closed)
		}
	})
	return cs, done
}

// hello opens the channel on cs as the agent does, with hello as the
// handshake's payload.
func (e *streamEnv) hello(t *testing.T, cs *chanStream, ch *agentv1.Challenge, hello *agentv1.Hello) {
	t.Helper()
	b, err := proto.Marshal(hello)
	if err != nil {
		t.Fatal(err)
	}
	msg, hs, err := agentchannel.OpenChannel(e.key, e.agent, ch.PublicKey, ch.Nonce, b)
	if err != nil {
		t.Fatal(err)
	}
	cs.in <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_ChannelHello{ChannelHello: &agentv1.ChannelHello{AgentId: e.agent, Noise: msg}}}
	m := cs.next(t)
	accept := m.GetChannelAccept()
	if accept == nil {
		t.Fatalf("imsd answered the channel hello with %v", m)
	}
	c, err := hs.Finish(accept)
	if err != nil {
		t.Fatal(err)
	}
	cs.agent = c
}

// Every lease deadline imsd stores is the lease plus the grace from the
// moment it read the renewal; a heartbeat naming jobs is answered with
// the leases renewed, and one naming a lost job gets that job refused.
func TestLeaseRenewalsAreAnsweredAndIncludeTheGrace(t *testing.T) {
	e := newStreamEnv(t)
	ctx := context.Background()
	if err := e.st.EnqueueJob(ctx, store.Job{ID: "job_1", InstallID: "ins_1", ComponentType: "action", Operation: "apply",
		Config: []byte(`{}`), MaxAttempts: 3, Timeout: time.Minute, CreatedAt: e.clk.Now(), CreatedBy: "t"}); err != nil {
		t.Fatal(err)
	}
	cs, _ := e.open(t, "inst-a")
	if w := cs.next(t).GetWelcome(); w == nil || w.InstallId != "ins_1" || w.LeaseDurationMs != testLease.Milliseconds() {
		t.Fatalf("want a welcome for ins_1 with the lease, got %v", w)
	}
	as := cs.next(t).GetAssignment()
	if as == nil || as.JobId != "job_1" || as.InstallId != "ins_1" {
		t.Fatalf("want job_1 assigned, got %v", as)
	}
	claimedAt := e.clk.Now()
	if j, _ := e.st.GetJob(ctx, "job_1"); !j.LeaseDeadline.Equal(claimedAt.Add(testLease + testGrace)) {
		t.Fatalf("lease deadline after the claim = %s, want claim + lease + grace = %s", j.LeaseDeadline, claimedAt.Add(testLease+testGrace))
	}

	e.clk.Add(5 * time.Second)
	cs.in <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Ack{Ack: &agentv1.JobAck{WriteId: 1, JobId: "job_1", FencingToken: as.FencingToken}}}
	if acc := cs.next(t).GetAccepted(); acc == nil || acc.WriteId != 1 {
		t.Fatalf("want the ack accepted")
	}
	if j, _ := e.st.GetJob(ctx, "job_1"); !j.LeaseDeadline.Equal(e.clk.Now().Add(testLease + testGrace)) {
		t.Fatalf("lease deadline after the ack = %s, want ack + lease + grace", j.LeaseDeadline)
	}

	e.clk.Add(10 * time.Second)
	cs.in <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Heartbeat{Heartbeat: &agentv1.Heartbeat{Seq: 7, Running: []*agentv1.RunningJob{
		{JobId: "job_1", FencingToken: as.FencingToken}, {JobId: "job_gone", FencingToken: 1},
	}}}}
	r := cs.next(t).GetRenewed()
	if r == nil || r.HeartbeatSeq != 7 || len(r.JobIds) != 1 || r.JobIds[0] != "job_1" {
		t.Fatalf("want LeasesRenewed{seq 7, [job_1]}, got %v", r)
	}
	if rej := cs.next(t).GetRejected(); rej == nil || rej.JobId != "job_gone" {
		t.Fatalf("want job_gone refused, got %v", rej)
	}
	if j, _ := e.st.GetJob(ctx, "job_1"); !j.LeaseDeadline.Equal(e.clk.Now().Add(testLease + testGrace)) {
		t.Fatalf("lease deadline after the heartbeat = %s, want heartbeat + lease + grace", j.LeaseDeadline)
	}

	// An idle heartbeat (no jobs) gets no answer: idle agents cost nothing.
	cs.in <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Heartbeat{Heartbeat: &agentv1.Heartbeat{Seq: 8}}}
	select {
	case m := <-cs.out:
		t.Fatalf("an empty heartbeat was answered: %v", m)
	case <-time.After(100 * time.Millisecond):
	}
}

// A second process with the same identity is refused while the first
// holds the stream; a restarted process (a new instance) replaces it.
func TestSecondProcessOfOneIdentityIsRefused(t *testing.T) {
	e := newStreamEnv(t)
	first, _ := e.open(t, "inst-a")
	first.next(t) // welcome
	second, secondDone := e.open(t, "inst-b")
	second.next(t) // welcome: a new instance, as after a restart, takes the stream
	// The first process comes back: it is the instance the second replaced.
	third, thirdDone := e.open(t, "inst-a")
	select {
	case err := <-thirdDone:
		if connect.CodeOf(err) != connect.CodeAborted || !strings.Contains(err.Error(), "share this agent's identity") {
			t.Fatalf("the returning first process got %v, want aborted naming the shared identity", err)
		}
	case m := <-third.out:
		t.Fatalf("the returning first process was served: %v", m)
	case <-time.After(5 * time.Second):
		t.Fatal("no answer to the returning first process")
	}
	if e.obs.conflicts != 1 {
		t.Fatalf("conflicts counted %d, want 1", e.obs.conflicts)
	}
	a, err := e.st.GetAgent(context.Background(), e.agent)
	if err != nil || a.Conflict == "" || !a.ConflictAt.Equal(e.clk.Now()) {
		t.Fatalf("agent record = %+v, %v; want the conflict recorded now", a, err)
	}
	select {
	case err := <-secondDone:
		t.Fatalf("the holder's stream ended: %v", err)
	default:
	}
	_ = first
}

// Assignments are signed, valid until a lease and its grace from now. An
// agent's refusal (a result refused "refused: ...") ends the job only under
// the token imsd gave it, before any ack, and is logged at ERROR; one
// under another token is rejected and leaves the job as it was.
func TestSignedAssignmentAndRefusalReport(t *testing.T) {
	e := newStreamEnv(t)
	ctx := context.Background()
	if err := e.st.EnqueueJob(ctx, store.Job{ID: "job_1", InstallID: "ins_1", ComponentType: "action", Operation: "apply",
		Config: []byte(`{"steps":[{"run":"x"}]}`), MaxAttempts: 3, Timeout: time.Minute, CreatedAt: e.clk.Now(), CreatedBy: "t"}); err != nil {
		t.Fatal(err)
	}
	cs, _ := e.open(t, "inst-a")
	cs.next(t) // welcome
	as := cs.next(t).GetAssignment()
	sig := as.GetSignature()
	if sig == nil || sig.KeyId != e.svc.cfg.SigningKey.ID || sig.ExpireUnixMs != e.clk.Now().Add(testLease+testGrace).UnixMilli() {
		t.Fatalf("signature %v: want key %s, expiry lease + grace from now", sig, e.svc.cfg.SigningKey.ID)
	}
	// The agent decodes the config the assignment carries as raw bytes.
	b, _ := proto.Marshal(as)
	var got agentv1.JobAssignment
	if err := proto.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	d, _ := agentproto.ConfigDigest(got.GetConfig().AsMap())
	c := agentproto.JobClaims{KeyID: sig.KeyId, InstallID: "ins_1", AgentID: e.agent, JobID: "job_1", Attempt: 1, FencingToken: as.FencingToken,
		Mode: got.Mode, Component: got.Component, ComponentType: "action", Operation: "apply", TimeoutSeconds: 60, ConfigDigest: d, Expires: time.UnixMilli(sig.ExpireUnixMs)}
	if err := agentproto.VerifyJob(map[string]ed25519.PublicKey{sig.KeyId: e.svc.cfg.SigningKey.Public}, &c, sig.Signature, e.clk.Now()); err != nil {
		t.Fatalf("the assignment's signature: %v", err)
	}

	refuse := func(id uint64, token int64) {
		cs.in <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Result{Result: &agentv1.JobResult{
			WriteId: id, JobId: "job_1", FencingToken: token, Outcome: agentv1.Outcome_OUTCOME_REFUSED, ExitCode: -1,
			Error: RefusedPrefix + "attempt 1 of job job_1: the signature has expired"}}}
	}
	refuse(1, as.FencingToken+1)
	if rej := cs.next(t).GetRejected(); rej == nil || rej.WriteId != 1 {
		t.Fatalf("a refusal under another token: want it rejected")
	}
	if j, _ := e.st.GetJob(ctx, "job_1"); j.State != store.JobAssigned {
		t.Fatalf("after a refusal under another token the job is %s, want still assigned", j.State)
	}
	refuse(2, as.FencingToken)
	if acc := cs.next(t).GetAccepted(); acc == nil || acc.WriteId != 2 {
		t.Fatalf("the refusal under the job's token: want it accepted")
	}
	if j, _ := e.st.GetJob(ctx, "job_1"); j.State != store.JobRefused || !strings.HasPrefix(j.Error, RefusedPrefix) {
		t.Fatalf("after the refusal the job is %s (%q), want refused", j.State, j.Error)
	}
	if l := e.logs.String(); !strings.Contains(l, `level=ERROR msg="agent refused a job"`) {
		t.Fatalf("no ERROR line for the refusal:\n%s", l)
	}
}

// last_seen is written at most once per lease while the stream is live
// (people are shown "connected" then), and when the stream ends it is the
// time of the agent's last message, not the last write: an agent heard
// 20 s ago does not show 50 s.
func TestLastSeenAtDisconnectIsTheLastMessage(t *testing.T) {
	e := newStreamEnv(t)
	ctx := context.Background()
	cs, done := e.open(t, "inst-a")
	if cs.next(t).GetWelcome() == nil {
		t.Fatal("want a welcome")
	}
	hello := e.clk.Now()
	var last time.Time
	for seq := range 2 {
		e.clk.Add(10 * time.Second)
		last = e.clk.Now()
		// A heartbeat naming an unknown job is answered: the test knows it
		// was handled.
		cs.in <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Heartbeat{Heartbeat: &agentv1.Heartbeat{Seq: uint64(seq),
			Running: []*agentv1.RunningJob{{JobId: "job_gone", FencingToken: 1}}}}}
		for cs.next(t).GetRejected() == nil {
		}
	}
	a, err := e.st.GetAgent(ctx, e.agent)
	if err != nil {
		t.Fatal(err)
	}
	if !a.LastSeenAt.Equal(hello) {
		t.Fatalf("while connected, last seen = %s, want the hello's %s (one write per lease)", a.LastSeenAt, hello)
	}
	e.clk.Add(30 * time.Second)
	close(cs.closed)
	<-done
	if a, err = e.st.GetAgent(ctx, e.agent); err != nil {
		t.Fatal(err)
	}
	if !a.LastSeenAt.Equal(last) {
		t.Fatalf("after the stream ended, last seen = %s, want the last heartbeat's %s", a.LastSeenAt, last)
	}
}

// An agent outside the version-skew window is refused after its hello
// verified: failed_precondition, one line naming both versions and the
// window, the window in Byoc-Version-Window; no channel is accepted.
func TestAgentOutsideVersionWindowIsRefused(t *testing.T) {
	e := newStreamEnv(t)
	e.svc.cfg.Version = "v1.5.0"
	for _, tc := range []struct {
		version string
		ok      bool
	}{{"v1.4.2", true}, {"v1.2.0", false}, {"v2.0.0", false}, {"dev-abc", true}} {
		cs := newChanStream()
		done := make(chan error, 1)
		go func() { done <- e.svc.Serve(context.Background(), cs) }()
		ch := cs.next(t).GetChallenge()
		b, _ := proto.Marshal(&agentv1.Hello{AgentId: e.agent, Signature: agentproto.SignChallenge(e.key, e.agent, ch.Nonce), Capacity: 1, Version: tc.version})
		msg, _, err := agentchannel.OpenChannel(e.key, e.agent, ch.PublicKey, ch.Nonce, b)
		if err != nil {
			t.Fatal(err)
		}
		cs.in <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_ChannelHello{ChannelHello: &agentv1.ChannelHello{AgentId: e.agent, Noise: msg}}}
		if tc.ok {
			if m := cs.next(t); m.GetChannelAccept() == nil {
				t.Fatalf("%s: answered %v, want the channel accepted", tc.version, m)
			}
			close(cs.closed)
			<-done
			continue
		}
		err = <-done
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeFailedPrecondition || ce.Meta().Get(agentproto.VersionRefusalHeader) != ">= v1.3.0, < v1.6.0" ||
			!strings.Contains(err.Error(), "agentd "+tc.version+" is outside the agent versions imsd v1.5.0 serves (>= v1.3.0, < v1.6.0): update agentd") {
			t.Fatalf("%s: %v", tc.version, err)
		}
	}
}
