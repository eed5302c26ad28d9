package agentapi

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/byoc-dev/byoc/imsd/telemetry"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// openTelemetry opens a stream whose hello reports telemetry mode.
func (e *streamEnv) openTelemetry(t *testing.T, mode string) (*chanStream, chan error) {
	t.Helper()
	cs := newChanStream()
	done := make(chan error, 1)
	go func() { done <- e.svc.Serve(context.Background(), cs) }()
	ch := cs.next(t).GetChallenge()
	e.hello(t, cs, ch, &agentv1.Hello{AgentId: e.agent, Signature: agentproto.SignChallenge(e.key, e.agent, ch.Nonce), Capacity: 2,
		Permissions: &agentv1.Permissions{Telemetry: &agentv1.TelemetrySetting{Mode: mode}}})
	t.Cleanup(func() {
		select {
		case <-cs.closed:
		default:
			close(cs.closed)
		}
	})
	return cs, done
}

func telemetryBatch(now time.Time, samples, lines int, text string) *agentv1.ConnectRequest {
	b := &agentv1.TelemetryBatch{}
	for range samples {
		b.Samples = append(b.Samples, &agentv1.MetricSample{Source: "api", Name: "up", Value: 1, Time: timestamppb.New(now)})
	}
	for range lines {
		b.Lines = append(b.Lines, &agentv1.TelemetryLine{Source: "app", Text: text, Time: timestamppb.New(now)})
	}
	return &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Telemetry{Telemetry: b}}
}

// imsd holds what an agent forwards only under the setting that agent
// reported: nothing while it reported off, no lines under metrics, and
// what it held is forgotten when a heartbeat reports off. A batch over
// the protocol's bounds (2000 samples, 500 lines, a line over 16 KiB)
// ends the stream, naming the bound.
func TestTelemetryHeldUnderTheReportedSetting(t *testing.T) {
	e := newStreamEnv(t)
	tel := telemetry.New(telemetry.Config{})
	e.svc.cfg.Telemetry = tel
	now := e.clk.Now()
	// barrier waits for imsd to answer a heartbeat: what came before it
	// was handled.
	// (a heartbeat naming a job is answered with the renewals).
	var seq uint64
	barrier := func(cs *chanStream, mode string) {
		t.Helper()
		seq++
		cs.in <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Heartbeat{Heartbeat: &agentv1.Heartbeat{Seq: seq,
			Running:     []*agentv1.RunningJob{{JobId: "job_none", FencingToken: 1}},
			Permissions: &agentv1.Permissions{Telemetry: &agentv1.TelemetrySetting{Mode: mode}}}}}
		for {
			if m := cs.next(t); m.GetRenewed().GetHeartbeatSeq() == seq {
				return
			}
		}
	}

	// A mode agentd does not have (here one that would print a forged
	// line and an escape sequence to the operator) is off.
	odd, _ := e.openTelemetry(t, "metrics\nforged_total 1\x1b[2J")
	odd.next(t) // welcome
	odd.in <- telemetryBatch(now, 1, 0, "")
	barrier(odd, "metrics\nforged_total 1\x1b[2J")
	if got := tel.Get("ins_1", 0, now); got.Setting != "" || len(got.Samples) != 0 {
		t.Fatalf("an unknown mode: setting %q, %d samples; want off, none", got.Setting, len(got.Samples))
	}
	close(odd.closed)

	cs, _ := e.openTelemetry(t, "off")
	cs.next(t) // welcome
	cs.in <- telemetryBatch(now, 3, 3, "sent while off")
	barrier(cs, "off")
	if got := tel.Get("ins_1", 0, now); len(got.Samples) != 0 || len(got.Lines) != 0 {
		t.Fatalf("held while the agent reported off: %+v", got)
	}
	barrier(cs, "metrics")
	cs.in <- telemetryBatch(now, 1, 2, "a line under metrics")
	barrier(cs, "metrics")
	if got := tel.Get("ins_1", 0, now); len(got.Samples) != 1 || len(got.Lines) != 0 {
		t.Fatalf("under metrics: %d samples, %d lines; want 1, 0", len(got.Samples), len(got.Lines))
	}
	barrier(cs, "off")
	if got := tel.Get("ins_1", 0, now); len(got.Samples) != 0 {
		t.Fatalf("still held after off: %+v", got)
	}

	for _, tt := range []struct {
		batch *agentv1.ConnectRequest
		want  string
	}{
		{telemetryBatch(now, MaxTelemetrySamples+1, 0, ""), "exceed the batch limits"},
		{telemetryBatch(now, 0, MaxTelemetryLines+1, "x"), "exceed the batch limits"},
		{telemetryBatch(now, 0, 1, strings.Repeat("x", maxTelemetryText+1)), "telemetry.lines[0].text"},
	} {
		cs, done := e.openTelemetry(t, "metrics,logs")
		cs.next(t)
		cs.in <- tt.batch
		select {
		case err := <-done:
			if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("over the bounds: %v, want invalid argument naming %q", err, tt.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("a batch over the bounds (%s) did not end the stream", tt.want)
		}
	}
}
