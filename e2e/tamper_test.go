package e2e

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/e2e/cluster"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1/agentv1connect"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// tamperProxy stands between real agentd processes and the real imsd, as
// a man in the middle would: it passes every message on, lets a test
// rewrite, hold or drop each assignment on its way down, and inject
// messages into the stream of an install's agent.
type tamperProxy struct {
	agentv1connect.UnimplementedAgentServiceHandler
	up  agentv1connect.AgentServiceClient
	url string

	mu sync.Mutex
	// rewrite, when set, returns what to send the agent of install in
	// place of as (nothing drops it). It may block (hold it).
	rewrite func(install string, as *agentv1.JobAssignment) []*agentv1.JobAssignment
	// seen holds every assignment passed down, by job id.
	seen map[string]*agentv1.JobAssignment
	// inject feeds each install's current stream.
	inject map[string]chan *agentv1.ConnectResponse
	// agents holds each agent's current stream (by agent id, from its
	// hello) and the install it belongs to.
	agents map[string]proxiedAgent
	// copyAcross, when set, sends a copy of every assignment passed down
	// to each other agent of the same install too.
	copyAcross bool
	// acks records every ack passed up: agent id → job ids.
	acks map[string][]string
}

type proxiedAgent struct {
	install string
	inject  chan *agentv1.ConnectResponse
}

func startTamperProxy(t *testing.T, imsURL string) *tamperProxy {
	t.Helper()
	p := &tamperProxy{
		up:   agentv1connect.NewAgentServiceClient(agent.DefaultHTTPClient(), imsURL),
		seen: map[string]*agentv1.JobAssignment{}, inject: map[string]chan *agentv1.ConnectResponse{},
		agents: map[string]proxiedAgent{}, acks: map[string][]string{},
	}
	mux := http.NewServeMux()
	mux.Handle(agentv1connect.NewAgentServiceHandler(p))
	protos := new(http.Protocols)
	protos.SetUnencryptedHTTP2(true)
	protos.SetHTTP1(true)
	srv := &http.Server{Handler: mux, Protocols: protos}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	p.url = "http://" + ln.Addr().String()
	return p
}

func (p *tamperProxy) Enroll(ctx context.Context, req *connect.Request[agentv1.EnrollRequest]) (*connect.Response[agentv1.EnrollResponse], error) {
	r, err := p.up.Enroll(ctx, connect.NewRequest(req.Msg))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(r.Msg), nil
}

func (p *tamperProxy) Connect(ctx context.Context, st *connect.BidiStream[agentv1.ConnectRequest, agentv1.ConnectResponse]) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	up := p.up.Connect(ctx)
	defer up.CloseRequest()
	if err := up.Send(nil); err != nil {
		return err
	}
	// Up: the agent's messages as they are.
	hello := make(chan string, 1)
	go func() {
		defer cancel()
		agentID := ""
		for {
			m, err := st.Receive()
			if err != nil {
				return
			}
			if h := m.GetHello(); h != nil && agentID == "" {
				agentID = h.AgentId
				hello <- agentID
			}
			if a := m.GetAck(); a != nil {
				p.mu.Lock()
				p.acks[agentID] = append(p.acks[agentID], a.JobId)
				p.mu.Unlock()
			}
			if up.Send(m) != nil {
				return
			}
		}
	}()
	downs := make(chan *agentv1.ConnectResponse)
	go func() {
		defer cancel()
		for {
			m, err := up.Receive()
			if err != nil {
				return
			}
			select {
			case downs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	install, agentID := "", ""
	inject := make(chan *agentv1.ConnectResponse, 10)
	send := func(m *agentv1.ConnectResponse) error { return st.Send(m) }
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-inject:
			if err := send(m); err != nil {
				return err
			}
		case m := <-downs:
			if w := m.GetWelcome(); w != nil {
				install = w.InstallId
				select {
				case agentID = <-hello:
				default:
				}
				p.mu.Lock()
				p.inject[install] = inject
				p.agents[agentID] = proxiedAgent{install: install, inject: inject}
				p.mu.Unlock()
			}
			as := m.GetAssignment()
			if as == nil {
				if err := send(m); err != nil {
					return err
				}
				continue
			}
			p.mu.Lock()
			p.seen[as.JobId] = proto.Clone(as).(*agentv1.JobAssignment)
			rewrite := p.rewrite
			var others []chan *agentv1.ConnectResponse
			for id, a := range p.agents {
				if p.copyAcross && id != agentID && a.install == install {
					others = append(others, a.inject)
				}
			}
			p.mu.Unlock()
			for _, o := range others {
				o <- &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Assignment{Assignment: proto.Clone(as).(*agentv1.JobAssignment)}}
			}
			out := []*agentv1.JobAssignment{as}
			if rewrite != nil {
				out = rewrite(install, as)
			}
			for _, a := range out {
				if err := send(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Assignment{Assignment: a}}); err != nil {
					return err
				}
			}
		}
	}
}

// injectInto sends as to the agent of install (its id), on its current
// stream.
func (p *tamperProxy) injectInto(t *testing.T, install string, as *agentv1.JobAssignment) {
	t.Helper()
	p.mu.Lock()
	ch := p.inject[install]
	p.mu.Unlock()
	if ch == nil {
		t.Fatalf("no stream of install %s through the proxy", install)
	}
	ch <- &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Assignment{Assignment: proto.Clone(as).(*agentv1.JobAssignment)}}
}

func (p *tamperProxy) setRewrite(f func(install string, as *agentv1.JobAssignment) []*agentv1.JobAssignment) {
	p.mu.Lock()
	p.rewrite = f
	p.mu.Unlock()
}

// wantAgentError waits for an ERROR line of the agent refusing job for
// reason.
func wantAgentError(t *testing.T, p *cluster.AgentProc, job, reason string) {
	t.Helper()
	cluster.Eventually(t, 20*time.Second, "the agent's refusal of "+job, func() bool { return agentRefused(p, job, reason) })
}

// agentRefused reports whether the agent logged its refusal of job for
// reason.
func agentRefused(p *cluster.AgentProc, job, reason string) bool {
	for _, l := range strings.Split(p.Output(), "\n") {
		if strings.Contains(l, `level=ERROR msg="refusing an assignment"`) && strings.Contains(l, "job="+job) && strings.Contains(l, reason) {
			return true
		}
	}
	return false
}

// Tamper probes with real processes, through a man in the middle between
// agentd and imsd: an assignment altered in flight, replayed twice,
// replayed to a second install, or delivered after its expiry is refused
// by the agent (an ERROR line); where imsd gave the agent that token, the
// job ends failed with the agent's reason. Nothing of it runs.
func TestTamperProbes(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	px := startTamperProxy(t, ims.URL())
	insA, tokA := cluster.NewInstall(t, ims.Admin(), "shop", "acme")
	insB, tokB := cluster.NewInstall(t, ims.Admin(), "shop", "beta")
	agA := cluster.StartAgent(t, px.url, tokA, filepath.Join(t.TempDir(), "a"))
	agB := cluster.StartAgent(t, px.url, tokB, filepath.Join(t.TempDir(), "b"))
	waitConnected(t, ims, "acme")
	waitConnected(t, ims, "beta")

	t.Run("altered in flight", func(t *testing.T) {
		px.setRewrite(func(_ string, as *agentv1.JobAssignment) []*agentv1.JobAssignment {
			if as.Config != nil { // what a man in the middle would run
				as.Config = actionConfig(t, "echo TAMPERED")
			}
			return []*agentv1.JobAssignment{as}
		})
		defer px.setRewrite(nil)
		job := enqueue(t, ims.Admin(), "acme", `echo original`, 60)
		lines, end := follow(t, ims.Admin(), job.Id)
		if end.State != imsv1.JobState_JOB_STATE_REFUSED || !strings.HasPrefix(end.Error, "refused: ") || !strings.Contains(end.Error, "does not match") {
			t.Fatalf("job ended %v (%q), want failed with the agent's refusal", end.State, end.Error)
		}
		if len(lines) != 0 {
			t.Fatalf("the altered job ran: %v", lines)
		}
		wantAgentError(t, agA, job.Id, "does not match")
	})

	// A job that ran, to replay.
	job := enqueue(t, ims.Admin(), "acme", `echo once`, 60)
	if _, end := follow(t, ims.Admin(), job.Id); end.State != imsv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("job ended %v (%s)", end.State, end.Error)
	}
	px.mu.Lock()
	ran := px.seen[job.Id]
	px.mu.Unlock()

	t.Run("replayed twice", func(t *testing.T) {
		// The agent ignores a copy of an attempt it still holds (a resend
		// after a reconnect looks the same), and it holds one until imsd's
		// answer to its result arrives, which may come after the job reads
		// succeeded: replay until it no longer holds it.
		for deadline := time.Now().Add(20 * time.Second); ; {
			px.injectInto(t, insA.Id, ran)
			if agentRefused(agA, job.Id, "already run") || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		wantAgentError(t, agA, job.Id, "already run")
	})
	t.Run("replayed to a second install", func(t *testing.T) {
		px.injectInto(t, insB.Id, ran)
		wantAgentError(t, agB, job.Id, `for install \"`)
	})
	t.Run("expired", func(t *testing.T) {
		// Hold the first attempt past its signature's expiry (a lease and
		// its grace), then deliver it; imsd meanwhile hands out attempt 2.
		held := make(chan *agentv1.JobAssignment, 1)
		px.setRewrite(func(_ string, as *agentv1.JobAssignment) []*agentv1.JobAssignment {
			if as.Attempt == 1 {
				held <- as
				return nil
			}
			return []*agentv1.JobAssignment{as}
		})
		defer px.setRewrite(nil)
		job := enqueue(t, ims.Admin(), "acme", `echo late`, 60)
		first := <-held
		wait := time.Until(time.UnixMilli(first.GetSignature().GetExpireUnixMs())) + 100*time.Millisecond
		time.Sleep(wait) // the signature's own expiry: nothing to poll
		px.injectInto(t, insA.Id, first)
		wantAgentError(t, agA, job.Id, "expired")
		if _, end := follow(t, ims.Admin(), job.Id); end.State != imsv1.JobState_JOB_STATE_SUCCEEDED || end.Attempt != 2 {
			t.Fatalf("job ended %v attempt %d (%s), want attempt 2 to succeed", end.State, end.Attempt, end.Error)
		}
	})
}

// A man in the middle relaying two agents of one install copies every
// assignment imsd gives one agent to the other. The copy is refused by the
// agent it was not signed for, before any ack (the signature names the
// agent), and the job runs once, on the agent imsd chose.
func TestAssignmentCopiedToAnotherAgentNeverRuns(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	px := startTamperProxy(t, ims.URL())
	c := ims.Admin()
	_, tokA := cluster.NewInstall(t, c, "shop", "acme")
	agA := cluster.StartAgent(t, px.url, tokA, filepath.Join(t.TempDir(), "a"))
	waitConnected(t, ims, "acme")
	tokB, err := c.CreateEnrollmentToken(context.Background(), connect.NewRequest(&imsv1.CreateEnrollmentTokenRequest{Install: "acme"}))
	if err != nil {
		t.Fatal(err)
	}
	agB := cluster.StartAgent(t, px.url, tokB.Msg.EnrollmentToken.Token, filepath.Join(t.TempDir(), "b"))
	cluster.Eventually(t, 30*time.Second, "both agents connected through the proxy", func() bool {
		px.mu.Lock()
		defer px.mu.Unlock()
		return len(px.agents) == 2
	})
	px.mu.Lock()
	px.copyAcross = true
	px.mu.Unlock()

	job := enqueue(t, c, "acme", `echo "ran on $(hostname) pid $$"`, 60)
	lines, end := follow(t, c, job.Id)
	if end.State != imsv1.JobState_JOB_STATE_SUCCEEDED || end.Attempt != 1 {
		t.Fatalf("job ended %v attempt %d (%s), want attempt 1 to succeed", end.State, end.Attempt, end.Error)
	}
	runs := 0
	for _, l := range lines {
		if strings.HasPrefix(l.Text, "ran on ") {
			runs++
		}
	}
	if runs != 1 {
		t.Fatalf("the script ran %d times (logs %v), want once", runs, lines)
	}
	// One agent refused the copy, saying why.
	cluster.Eventually(t, 20*time.Second, "an agent's refusal of the copy", func() bool {
		return agentRefused(agA, job.Id, "does not match") || agentRefused(agB, job.Id, "does not match")
	})
	px.mu.Lock()
	defer px.mu.Unlock()
	acked := 0
	for _, jobs := range px.acks {
		if slices.Contains(jobs, job.Id) {
			acked++
		}
	}
	if acked != 1 {
		t.Fatalf("%d agents acked the job (acks %v), want 1: the copy must be refused before an ack", acked, px.acks)
	}
}
