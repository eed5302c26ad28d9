package agent

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/internal/auditchain"
	"github.com/byoc-dev/byoc/rpc/agentchannel"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1/agentv1connect"
)

// fakeIMS is a hand-driven imsd: each stream's messages from the agent go
// to up, and the test sends down what it likes.
type fakeIMS struct {
	agentv1connect.UnimplementedAgentServiceHandler
	welcome *agentv1.Welcome
	streams chan *fakeStream
	// key signs assignments (sign); startFake makes it.
	key ed25519.PrivateKey
	// agentKey is the public key of the agent startFakeIn starts (the
	// key it registered).
	agentKey atomic.Value
	// chanKey, if set, is the key imsd's side of the channel is bound to
	// (default key).
	chanKey ed25519.PrivateKey
	// refuse, if set, answers every channel hello with its error.
	refuse func(nonce []byte, agentID string) error
	// agent is the agent assignments are signed for ("" is agt_1, the
	// agent startFake enrols).
	agent string
	// enrollKey is the public key Enroll returns; enrolls counts calls.
	enrollKey []byte
	enrolls   atomic.Int32

	// auditMu guards chain, the install's audit chain as this imsd keeps
	// it: a job.acked record per ack, sent to the agent before anything
	// else that follows the ack, as imsd does. With noAudit set, no
	// record is kept or sent.
	auditMu sync.Mutex
	chain   []auditchain.Record
	noAudit bool
	// onHello, if set, sees every hello.
	onHello func(*agentv1.Hello)
	// welcomeFor, if set, makes the welcome for a hello (default welcome).
	welcomeFor func(*agentv1.Hello) *agentv1.Welcome
}

// record appends an event to the fake's chain.
func (f *fakeIMS) record(kind, subject, data string) {
	f.auditMu.Lock()
	defer f.auditMu.Unlock()
	var prev *auditchain.Record
	if n := len(f.chain); n > 0 {
		prev = &f.chain[n-1]
	}
	f.chain = append(f.chain, auditchain.Next(prev, auditchain.Record{Chain: "ins_1", At: int64(len(f.chain)), Kind: kind, Actor: "agent:agt_1", Subject: subject, Data: data}))
}

// auditAfter is the fake's records after seq, as an AuditRecords message,
// or nil when there are none.
func (f *fakeIMS) auditAfter(seq int64) *agentv1.ConnectResponse {
	f.auditMu.Lock()
	defer f.auditMu.Unlock()
	var out []*agentv1.AuditRecord
	for _, r := range f.chain {
		if r.Seq > seq {
			out = append(out, &agentv1.AuditRecord{Chain: r.Chain, Seq: r.Seq, At: r.At, Kind: r.Kind, Actor: r.Actor, Subject: r.Subject, Data: r.Data, Prev: r.Prev, Hash: r.Hash})
		}
	}
	if len(out) == 0 {
		return nil
	}
	return &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Audit{Audit: &agentv1.AuditRecords{Records: out}}}
}

func (f *fakeIMS) Enroll(_ context.Context, req *connect.Request[agentv1.EnrollRequest]) (*connect.Response[agentv1.EnrollResponse], error) {
	f.enrolls.Add(1)
	return connect.NewResponse(&agentv1.EnrollResponse{AgentId: "agt_1", InstallId: "ins_1", ImsdPublicKey: f.enrollKey}), nil
}

type fakeStream struct {
	up   chan *agentv1.ConnectRequest
	down chan *agentv1.ConnectResponse
	done chan struct{}
}

func (f *fakeIMS) Connect(ctx context.Context, plain *connect.BidiStream[agentv1.ConnectRequest, agentv1.ConnectResponse]) error {
	if f.refuse != nil {
		// Challenge, then refuse the channel hello.
		if err := plain.Send(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Challenge{Challenge: &agentv1.Challenge{
			Nonce: []byte("n"), PublicKey: f.channelKey().Public().(ed25519.PublicKey)}}}); err != nil {
			return err
		}
		m, err := plain.Receive()
		if err != nil {
			return err
		}
		return f.refuse([]byte("n"), m.GetChannelHello().GetAgentId())
	}
	st, hello, err := agentchannel.Serve(plain, f.channelKey(), []byte("n"), func(string) ed25519.PublicKey {
		k, _ := f.agentKey.Load().(ed25519.PublicKey)
		return k
	})
	if err != nil {
		return err
	}
	sent := hello.GetAuditSeq()
	if f.onHello != nil {
		f.onHello(hello)
	}
	w := f.welcome
	if f.welcomeFor != nil {
		w = f.welcomeFor(hello)
	}
	if err := st.Send(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Welcome{Welcome: w}}); err != nil {
		return err
	}
	fs := &fakeStream{up: make(chan *agentv1.ConnectRequest, 100), down: make(chan *agentv1.ConnectResponse, 100), done: make(chan struct{})}
	defer close(fs.done)
	select {
	case f.streams <- fs:
	case <-ctx.Done():
		return nil
	}
	errc := make(chan error, 1)
	go func() {
		for {
			m, err := st.Receive()
			if err != nil {
				errc <- err
				return
			}
			if a := m.GetAck(); a != nil && !f.noAudit {
				f.record("job.acked", "job:"+a.JobId, fmt.Sprintf(`{"token":"%d"}`, a.FencingToken))
			}
			fs.up <- m
		}
	}()
	for {
		select {
		case m := <-fs.down:
			if m == nil {
				return connect.NewError(connect.CodeUnavailable, errors.New("test ends the stream"))
			}
			if a := f.auditAfter(sent); a != nil {
				if err := st.Send(a); err != nil {
					return err
				}
				rs := a.GetAudit().Records
				sent = rs[len(rs)-1].Seq
			}
			if err := st.Send(m); err != nil {
				return err
			}
		case err := <-errc:
			return err
		case <-ctx.Done():
			return nil
		}
	}
}

// runRecorder is a Runner that records what ran and blocks until its
// context ends or release is closed.
type runRecorder struct {
	mu      sync.Mutex
	started []string
	stopped []string
	configs []map[string]any // the config each run got
	// approved is the approved plan digest each run got.
	approved []string
	release  chan struct{}
}

func (r *runRecorder) Run(ctx context.Context, job Job, _ func(int32, string)) Outcome {
	r.mu.Lock()
	r.started = append(r.started, job.ID)
	r.configs = append(r.configs, job.Config)
	r.approved = append(r.approved, job.ApprovedPlanDigest)
	r.mu.Unlock()
	select {
	case <-ctx.Done():
		r.mu.Lock()
		r.stopped = append(r.stopped, job.ID)
		r.mu.Unlock()
		return Outcome{Outcome: agentv1.Outcome_OUTCOME_FAILED}
	case <-r.release:
		return Outcome{Outcome: agentv1.Outcome_OUTCOME_SUCCEEDED}
	}
}

func (r *runRecorder) get() (started, stopped []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.started...), append([]string(nil), r.stopped...)
}

// startFake serves f on loopback (h2c) and runs an agent of install
// "ins_1" against it, trusting f's signing key.
func startFake(t *testing.T, f *fakeIMS, rr *runRecorder) *Agent {
	t.Helper()
	a, _ := startFakeIn(t, f, rr, t.TempDir(), nil)
	return a
}

// serveFake serves f on loopback (h2c) and returns its URL.
func serveFake(t *testing.T, f *fakeIMS) string {
	t.Helper()
	if f.streams == nil {
		f.streams = make(chan *fakeStream, 10)
	}
	if f.welcome == nil {
		f.welcome = &agentv1.Welcome{InstallId: "ins_1", HeartbeatIntervalMs: 100, LeaseDurationMs: 600}
	}
	if f.key == nil {
		_, f.key, _ = ed25519.GenerateKey(nil)
	}
	mux := http.NewServeMux()
	mux.Handle(agentv1connect.NewAgentServiceHandler(f))
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: p}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// startFakeIn is startFake with the agent's state in dir (an identity is
// written unless one is there) and its log going to logw (if not nil).
// stop stops the agent.
func startFakeIn(t *testing.T, f *fakeIMS, rr Runner, dir string, logw io.Writer) (a *Agent, stop func()) {
	t.Helper()
	return startFakeWith(t, f, rr, dir, logw, nil)
}

// startFakeWith is startFakeIn with the agent's config changed by
// change (if not nil) before the agent starts.
func startFakeWith(t *testing.T, f *fakeIMS, rr Runner, dir string, logw io.Writer, change func(*Config)) (a *Agent, stop func()) {
	t.Helper()
	url := serveFake(t, f)
	if _, err := identity.Load(dir); err != nil {
		key, _ := identity.NewKey()
		if err := identity.Save(dir, identity.Identity{AgentID: "agt_1", InstallID: "ins_1", IMSURL: url, PrivateKey: key,
			IMSDKeys: []ed25519.PublicKey{f.key.Public().(ed25519.PublicKey)}}); err != nil {
			t.Fatal(err)
		}
	}
	if id, err := identity.Load(dir); err == nil {
		f.agentKey.Store(id.PrivateKey.Public().(ed25519.PublicKey))
	}
	if logw == nil {
		logw = io.Discard
	}
	cfg := Config{IMSURL: url, StateDir: dir, Runner: rr, Logger: slog.New(slog.NewTextHandler(logw, nil)),
		BackoffMin: 20 * time.Millisecond, BackoffMax: 50 * time.Millisecond, FlushInterval: 5 * time.Millisecond}
	if change != nil {
		change(&cfg)
	}
	a, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return a, stop
}

// assign is an assignment of job id to install signed with f's key, valid
// for a minute.
func (f *fakeIMS) assign(id string, token int64, install string) *agentv1.ConnectResponse {
	as := &agentv1.JobAssignment{
		JobId: id, FencingToken: token, Attempt: 1, ComponentType: "action", Operation: "apply", InstallId: install, TimeoutSeconds: 60,
		Config: mustStruct(map[string]any{"steps": []any{map[string]any{"run": "echo hi"}}}),
	}
	f.sign(as, f.key, time.Now().Add(time.Minute))
	return &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Assignment{Assignment: as}}
}

func (f *fakeIMS) channelKey() ed25519.PrivateKey {
	if f.chanKey != nil {
		return f.chanKey
	}
	return f.key
}

func (f *fakeIMS) agentID() string {
	if f.agent == "" {
		return "agt_1"
	}
	return f.agent
}

// sign signs as with key as imsd does, valid until expires.
func (f *fakeIMS) sign(as *agentv1.JobAssignment, key ed25519.PrivateKey, expires time.Time) {
	d, err := agentproto.ConfigDigest(as.GetConfig().AsMap())
	if err != nil {
		panic(err)
	}
	c := agentproto.JobClaims{
		KeyID: agentproto.KeyID(key.Public().(ed25519.PublicKey)), InstallID: as.InstallId, AgentID: f.agentID(), JobID: as.JobId, Attempt: int64(as.Attempt),
		FencingToken: as.FencingToken, Mode: as.Mode, Component: as.Component, ComponentType: as.ComponentType, Operation: as.Operation, TimeoutSeconds: as.TimeoutSeconds,
		ConfigDigest: d, Expires: expires, ApprovedPlanDigest: as.ApprovedPlanDigest,
	}
	as.Signature = &agentv1.JobSignature{KeyId: c.KeyID, ExpireUnixMs: expires.UnixMilli(), Signature: agentproto.SignJob(key, &c)}
}

func mustStruct(m map[string]any) *structpb.Struct {
	s, err := structpb.NewStruct(m)
	if err != nil {
		panic(err)
	}
	return s
}

// next returns the next message of the agent that is not a heartbeat.
func (fs *fakeStream) next(t *testing.T) *agentv1.ConnectRequest {
	t.Helper()
	deadline := time.After(20 * time.Second) // a liveness bound: -race on a loaded CI machine
	for {
		select {
		case m := <-fs.up:
			if m.GetHeartbeat() == nil {
				return m
			}
		case <-deadline:
			t.Fatal("no message from the agent")
		}
	}
}

// nextHeartbeat returns the agent's next heartbeat, dropping other
// messages. The agent's session loop handles imsd's messages, sends its
// writes and sends heartbeats on one goroutine, and the stream keeps
// order: a heartbeat that follows a write was sent after all the agent
// did on its way to that write, and one that follows the handling of a
// message (seen by what it names) after all that handling did.
func (fs *fakeStream) nextHeartbeat(t *testing.T) *agentv1.Heartbeat {
	t.Helper()
	deadline := time.After(20 * time.Second) // a liveness bound: -race on a loaded CI machine
	for {
		select {
		case m := <-fs.up:
			if hb := m.GetHeartbeat(); hb != nil {
				return hb
			}
		case <-deadline:
			t.Fatal("no heartbeat from the agent")
		}
	}
}

// names reports whether hb names job id as held.
func names(hb *agentv1.Heartbeat, id string) bool {
	return slices.ContainsFunc(hb.GetRunning(), func(r *agentv1.RunningJob) bool { return r.JobId == id })
}

// began reports whether the agent has begun an attempt of job id (it
// marks it so under a.mu before it starts the run, in beginLocked).
func began(a *Agent, id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	j := a.jobs[id]
	return j != nil && j.started
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// An attempt starts only once imsd accepted its ack, and one whose ack is
// refused never runs.
func TestAttemptStartsOnlyAfterTheAckIsAccepted(t *testing.T) {
	rr := &runRecorder{release: make(chan struct{})}
	f := &fakeIMS{}
	a := startFake(t, f, rr)
	fs := <-f.streams
	fs.down <- f.assign("job_a", 7, "ins_1")
	ack := fs.next(t).GetAck()
	if ack == nil || ack.JobId != "job_a" || ack.FencingToken != 7 {
		t.Fatalf("want an ack of job_a, got %v", ack)
	}
	// The heartbeat after the ack comes after everything the agent did
	// on taking the assignment and sending its ack (see nextHeartbeat):
	// had it begun the attempt on the way, the attempt would be marked
	// begun by now (beginLocked marks it before it starts the run).
	if hb := fs.nextHeartbeat(t); !names(hb, "job_a") {
		t.Fatalf("the heartbeat after the ack does not name job_a: %v", hb)
	}
	if began(a, "job_a") {
		t.Fatal("the attempt began before imsd accepted its ack")
	}
	if started, _ := rr.get(); len(started) != 0 {
		t.Fatalf("the job started before imsd accepted its ack: %v", started)
	}
	fs.down <- &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Accepted{Accepted: &agentv1.WriteAccepted{WriteId: ack.WriteId}}}
	eventually(t, "job_a to start", func() bool { s, _ := rr.get(); return len(s) == 1 })
	// The run gets the config the assignment carried (and its signature covered).
	rr.mu.Lock()
	got := rr.configs[0]
	rr.mu.Unlock()
	if steps, _ := got["steps"].([]any); len(steps) != 1 {
		t.Fatalf("the run got config %v, want the assignment's one step", got)
	}
	// An apply of an approved plan: the run gets the signed digest.
	m := f.assign("job_p", 9, "ins_1")
	digest := "sha256:" + strings.Repeat("0f", 32)
	m.GetAssignment().ApprovedPlanDigest = digest
	f.sign(m.GetAssignment(), f.key, time.Now().Add(time.Minute))
	fs.down <- m
	ack = fs.next(t).GetAck()
	fs.down <- &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Accepted{Accepted: &agentv1.WriteAccepted{WriteId: ack.WriteId}}}
	eventually(t, "job_p to start", func() bool { s, _ := rr.get(); return len(s) == 2 })
	rr.mu.Lock()
	approved := slices.Clone(rr.approved)
	rr.mu.Unlock()
	if !slices.Equal(approved, []string{"", digest}) {
		t.Fatalf("the runs got approved digests %q, want none then %s", approved, digest)
	}

	fs.down <- f.assign("job_b", 8, "ins_1")
	ack = fs.next(t).GetAck()
	a.mu.Lock()
	jb := a.jobs["job_b"]
	a.mu.Unlock()
	fs.down <- &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Rejected{Rejected: &agentv1.WriteRejected{
		WriteId: ack.WriteId, JobId: "job_b", Code: "failed_precondition", Message: "stale fencing token"}}}
	// The agent has handled the refusal once a heartbeat no longer names
	// job_b: the attempt is given up (stopping), so it can never begin
	// from then on; it must not have begun before.
	deadline := time.Now().Add(5 * time.Second)
	for hb := fs.nextHeartbeat(t); names(hb, "job_b"); hb = fs.nextHeartbeat(t) {
		if time.Now().After(deadline) {
			t.Fatal("the agent still holds job_b 5s after imsd refused its ack")
		}
	}
	a.mu.Lock()
	bBegan, bStopping := jb.started, jb.stopping
	a.mu.Unlock()
	if bBegan || !bStopping {
		t.Fatalf("job_b, whose ack imsd refused: began %v, given up %v; want never begun, given up", bBegan, bStopping)
	}
	if started, _ := rr.get(); len(started) != 2 {
		t.Fatalf("a job whose ack was refused ran: %v", started)
	}
	close(rr.release)
}

// The agent stops a running job itself once a lease passed without a
// renewal imsd confirmed, though the stream stays open; a job whose
// heartbeats are answered keeps running.
func TestAgentStopsAJobWhoseLeaseIsNotRenewed(t *testing.T) {
	rr := &runRecorder{release: make(chan struct{})}
	defer close(rr.release)
	f := &fakeIMS{welcome: &agentv1.Welcome{InstallId: "ins_1", HeartbeatIntervalMs: 100, LeaseDurationMs: 600}}
	startFake(t, f, rr)
	fs := <-f.streams
	fs.down <- f.assign("job_a", 7, "ins_1")
	ack := fs.next(t).GetAck()
	fs.down <- &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Accepted{Accepted: &agentv1.WriteAccepted{WriteId: ack.WriteId}}}
	eventually(t, "job_a to start", func() bool { s, _ := rr.get(); return len(s) == 1 })
	// Answer heartbeats for two leases: the job keeps running.
	until := time.Now().Add(1200 * time.Millisecond)
	for time.Now().Before(until) {
		select {
		case m := <-fs.up:
			if hb := m.GetHeartbeat(); hb != nil && len(hb.Running) > 0 {
				fs.down <- &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Renewed{Renewed: &agentv1.LeasesRenewed{HeartbeatSeq: hb.Seq, JobIds: []string{"job_a"}}}}
			}
		case <-time.After(50 * time.Millisecond):
		}
	}
	if _, stopped := rr.get(); len(stopped) != 0 {
		t.Fatalf("a job whose lease was renewed was stopped")
	}
	// Stop answering: within a lease (and the check interval) it stops.
	silent := time.Now()
	eventually(t, "job_a to be stopped", func() bool { _, s := rr.get(); return len(s) == 1 })
	if d := time.Since(silent); d > 600*time.Millisecond+300*time.Millisecond {
		t.Fatalf("stopped %s after the last renewal; the lease is 600ms", d)
	}
}

// A welcome or an assignment naming another install is refused: nothing
// of that server runs.
func TestAgentRefusesAnotherInstall(t *testing.T) {
	t.Run("assignment", func(t *testing.T) {
		rr := &runRecorder{release: make(chan struct{})}
		defer close(rr.release)
		f := &fakeIMS{}
		startFake(t, f, rr)
		fs := <-f.streams
		fs.down <- f.assign("job_x", 7, "ins_other")
		fs.down <- f.assign("job_ok", 8, "ins_1")
		if r := fs.next(t).GetResult(); r == nil || r.JobId != "job_x" || !strings.Contains(r.Error, "refused") {
			t.Fatalf("the first write is %v, want job_x's refusal", r)
		}
		ack := fs.next(t).GetAck()
		if ack == nil || ack.JobId != "job_ok" {
			t.Fatalf("the second write is %v, want the ack of job_ok", ack)
		}
	})
	t.Run("welcome", func(t *testing.T) {
		rr := &runRecorder{release: make(chan struct{})}
		defer close(rr.release)
		f := &fakeIMS{welcome: &agentv1.Welcome{InstallId: "ins_other", HeartbeatIntervalMs: 100, LeaseDurationMs: 600}}
		a := startFake(t, f, rr)
		fs := <-f.streams
		fs.down <- f.assign("job_x", 7, "ins_other")
		fs.down <- f.assign("job_y", 7, "ins_1")
		select {
		case m := <-fs.up:
			if m.GetAck() != nil {
				t.Fatalf("the agent acked a job of a server that named another install: %v", m)
			}
		case <-fs.done:
		case <-time.After(time.Second):
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		if err := a.WaitConnected(ctx); err == nil {
			t.Fatal("the agent counts a server naming another install as connected")
		}
	})
}

// signBatch signs as with key as imsd signs a batch: as is leaf index of
// a batch of size jobs, the others another agent's (agt_9's) jobs, valid
// until expires.
func (f *fakeIMS) signBatch(as *agentv1.JobAssignment, key ed25519.PrivateKey, expires time.Time, index, size int) {
	d, err := agentproto.ConfigDigest(as.GetConfig().AsMap())
	if err != nil {
		panic(err)
	}
	cs := make([]*agentproto.JobClaims, size)
	for i := range cs {
		c := agentproto.JobClaims{
			KeyID: agentproto.KeyID(key.Public().(ed25519.PublicKey)), InstallID: as.InstallId, AgentID: "agt_9", JobID: fmt.Sprintf("job_other_%d", i), Attempt: 1,
			FencingToken: int64(1000 + i), ComponentType: "action", Operation: "apply", TimeoutSeconds: 60, ConfigDigest: d, Expires: expires,
		}
		if i == index {
			c = agentproto.JobClaims{
				KeyID: c.KeyID, InstallID: as.InstallId, AgentID: f.agentID(), JobID: as.JobId, Attempt: int64(as.Attempt),
				FencingToken: as.FencingToken, Mode: as.Mode, Component: as.Component, ComponentType: as.ComponentType, Operation: as.Operation, TimeoutSeconds: as.TimeoutSeconds,
				ConfigDigest: d, Expires: expires, ApprovedPlanDigest: as.ApprovedPlanDigest,
			}
		}
		cs[i] = &c
	}
	sig, proofs, err := agentproto.SignJobBatch(key, cs)
	if err != nil {
		panic(err)
	}
	p := proofs[index]
	as.Signature = &agentv1.JobSignature{KeyId: cs[index].KeyID, ExpireUnixMs: expires.UnixMilli(), Signature: sig,
		BatchSize: p.Size, BatchIndex: p.Index, BatchProof: p.Path}
}
