package cluster

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/rpc/agentchannel"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1/agentv1connect"
)

// RawAgent speaks the agent protocol by hand, so tests can play an agent
// that misbehaves: one that goes silent, writes late, or writes to jobs
// that are not its own.
type RawAgent struct {
	ID     string
	Key    ed25519.PrivateKey
	Client agentv1connect.AgentServiceClient
	Stream *connect.BidiStreamForClient[agentv1.ConnectRequest, agentv1.ConnectResponse]
	// Chan is the stream's encrypted channel, once Connect opened it.
	Chan *agentchannel.AgentStream
	// IMSDKey is imsd's key from the enrolment, the one the channel must
	// be bound to.
	IMSDKey ed25519.PublicKey
	cancel  context.CancelFunc
	nextID  uint64
}

// EnrollRaw enrols a raw agent with token.
func EnrollRaw(tb testing.TB, url, token string) *RawAgent {
	tb.Helper()
	key, err := identity.NewKey()
	if err != nil {
		tb.Fatal(err)
	}
	hc := agent.DefaultHTTPClient()
	c := agentv1connect.NewAgentServiceClient(hc, url)
	resp, err := c.Enroll(context.Background(), connect.NewRequest(&agentv1.EnrollRequest{
		EnrollmentToken: token, PublicKey: key.Public().(ed25519.PublicKey), Role: "install",
	}))
	if err != nil {
		tb.Fatalf("enrol: %v", err)
	}
	// As agentd does: the stream gets a connection of its own, which
	// imsd's agent-wire server takes.
	hc.CloseIdleConnections()
	return &RawAgent{ID: resp.Msg.AgentId, Key: key, Client: c, IMSDKey: resp.Msg.ImsdPublicKey}
}

// Connect opens a stream, answers the challenge and returns the welcome.
func (r *RawAgent) Connect(tb testing.TB, capacity int32, running ...*agentv1.RunningJob) *agentv1.Welcome {
	tb.Helper()
	r.Close()
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.Stream = r.Client.Connect(ctx)
	tb.Cleanup(r.Close)
	if err := r.Stream.Send(nil); err != nil {
		tb.Fatalf("open stream: %v", err)
	}
	m, err := r.Stream.Receive()
	if err != nil {
		tb.Fatalf("receive challenge: %v", err)
	}
	ch := m.GetChallenge()
	r.Chan, err = agentchannel.Dial(r.Stream, ch, r.Key, r.ID, func(k ed25519.PublicKey) error {
		if !k.Equal(r.IMSDKey) {
			return fmt.Errorf("imsd offered key %s, enrolled with %s", agentproto.KeyID(k), agentproto.KeyID(r.IMSDKey))
		}
		return nil
	}, &agentv1.Hello{
		AgentId: r.ID, Signature: agentproto.SignChallenge(r.Key, r.ID, ch.GetNonce()), Capacity: capacity, Running: running,
	})
	if err != nil {
		tb.Fatalf("open the channel: %v", err)
	}
	m, err = r.Chan.Receive()
	if err != nil {
		tb.Fatalf("receive welcome: %v", err)
	}
	if m.GetWelcome() == nil {
		tb.Fatalf("expected a welcome, got %v", m)
	}
	return m.GetWelcome()
}

// Close ends the stream.
func (r *RawAgent) Close() {
	if r.cancel != nil {
		r.cancel()
		r.cancel = nil
	}
}

// Send sends one message, filling in a fresh write id, and returns the id.
func (r *RawAgent) Send(tb testing.TB, m *agentv1.ConnectRequest) uint64 {
	tb.Helper()
	r.nextID++
	switch x := m.Msg.(type) {
	case *agentv1.ConnectRequest_Ack:
		x.Ack.WriteId = r.nextID
	case *agentv1.ConnectRequest_Logs:
		x.Logs.WriteId = r.nextID
	case *agentv1.ConnectRequest_Result:
		x.Result.WriteId = r.nextID
	}
	if err := r.Chan.Send(m); err != nil {
		tb.Fatalf("send: %v", err)
	}
	return r.nextID
}

// Next receives the next message, or fails the test after timeout.
func (r *RawAgent) Next(tb testing.TB, timeout time.Duration) (*agentv1.ConnectResponse, error) {
	tb.Helper()
	type res struct {
		m   *agentv1.ConnectResponse
		err error
	}
	ch := make(chan res, 1)
	go func() {
		m, err := r.Chan.Receive()
		ch <- res{m, err}
	}()
	select {
	case x := <-ch:
		return x.m, x.err
	case <-time.After(timeout):
		tb.Fatalf("no message from imsd within %s", timeout)
		return nil, nil
	}
}

// Answer waits for the answer to write id, skipping other messages.
func (r *RawAgent) Answer(tb testing.TB, id uint64) *agentv1.ConnectResponse {
	tb.Helper()
	for {
		m, err := r.Next(tb, 10*time.Second)
		if err != nil {
			tb.Fatalf("waiting for the answer to write %d: %v", id, err)
		}
		if a := m.GetAccepted(); a != nil && a.WriteId == id {
			return m
		}
		if rj := m.GetRejected(); rj != nil && rj.WriteId == id {
			return m
		}
	}
}

// Assignment waits for the next job assignment.
func (r *RawAgent) Assignment(tb testing.TB) *agentv1.JobAssignment {
	tb.Helper()
	for {
		m, err := r.Next(tb, 10*time.Second)
		if err != nil {
			tb.Fatalf("waiting for an assignment: %v", err)
		}
		if a := m.GetAssignment(); a != nil {
			return a
		}
	}
}

// Logs builds a logs write.
func Logs1(jobID string, token int64, seq int64, text string) *agentv1.ConnectRequest {
	return &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Logs{Logs: &agentv1.JobLogs{
		JobId: jobID, FencingToken: token,
		Lines: []*agentv1.LogLine{{Seq: seq, Stream: 1, Text: text}},
	}}}
}

// Ack builds an ack write.
func Ack(jobID string, token int64) *agentv1.ConnectRequest {
	return &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Ack{Ack: &agentv1.JobAck{JobId: jobID, FencingToken: token}}}
}

// Result builds a result write.
func Result(jobID string, token int64, o agentv1.Outcome, code int32) *agentv1.ConnectRequest {
	return &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Result{Result: &agentv1.JobResult{
		JobId: jobID, FencingToken: token, Outcome: o, ExitCode: code,
	}}}
}

// String describes a response for test failures.
func String(m *agentv1.ConnectResponse) string { return fmt.Sprintf("%v", m) }
