package agentapi

// App telemetry: an agent whose customer turned telemetry on (its
// reported Permissions.telemetry) gets the app's telemetry declaration
// (telemetry.toml of the install's app revision) after its hello or the
// heartbeat that reports the change, and again every telemetryRefresh
// (a new revision); its batches are kept in imsd's memory, bounded
// (package imsd/telemetry). imsd never changes the setting: the agent
// enforces it, and only reports it.

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// telemetryRefresh is how often the declaration is read and sent again
// while telemetry is on.
const telemetryRefresh = 10 * time.Minute

// The bounds of one batch (agentd/telemetry keeps within them).
const (
	MaxTelemetrySamples = 2000
	MaxTelemetryLines   = 500
	maxTelemetryText    = 16 << 10
)

type telemetryState struct {
	mode   string
	sentAt time.Time
}

// bounded keeps at most 64 rules of at most 256 bytes each.
func bounded(list []string) []string {
	if len(list) > 64 {
		list = list[:64]
	}
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = truncate(s, 256)
	}
	return out
}

// reportTelemetry follows the telemetry setting the agent reported, and
// sends the declaration when telemetry is on and it was not sent (or
// telemetryRefresh ago). c.mu is held.
func (c *conn) reportTelemetry(ctx context.Context, p *agentv1.Permissions, now time.Time) error {
	if p == nil {
		return nil
	}
	// Only the modes agentd has: anything else (an agent's string, shown
	// to operators) is taken as off, and nothing of it is held.
	mode := p.GetTelemetry().GetMode()
	if mode != "metrics" && mode != "metrics,logs" {
		mode = ""
	}
	s := c.svc
	if mode != c.tel.mode {
		if s.cfg.Telemetry != nil {
			s.cfg.Telemetry.SetSetting(c.agent.InstallID, mode)
		}
		if c.tel.mode == "" {
			c.tel.sentAt = time.Time{}
		}
		c.tel.mode = mode
	}
	if mode == "" || s.cfg.TelemetryConfig == nil || (!c.tel.sentAt.IsZero() && now.Sub(c.tel.sentAt) < telemetryRefresh) {
		return nil
	}
	c.tel.sentAt = now
	cfg, err := s.cfg.TelemetryConfig(ctx, c.agent.InstallID)
	if err != nil {
		c.logger().WarnContext(ctx, "read the app's telemetry declaration", "err", err)
		return nil
	}
	if cfg == nil {
		cfg = &agentv1.TelemetryConfig{}
	}
	return c.send(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_TelemetryConfig{TelemetryConfig: cfg}})
}

// takeTelemetry keeps a batch the agent forwarded. A batch over the
// bounds ends the stream, as an oversized log batch does; one from an
// agent that did not report telemetry on is dropped.
func (c *conn) takeTelemetry(b *agentv1.TelemetryBatch, now time.Time) error {
	if len(b.Samples) > MaxTelemetrySamples || len(b.Lines) > MaxTelemetryLines {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("telemetry: %d samples and %d lines exceed the batch limits (%d, %d)",
			len(b.Samples), len(b.Lines), MaxTelemetrySamples, MaxTelemetryLines))
	}
	for i, l := range b.Lines {
		if len(l.Text) > maxTelemetryText {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("telemetry.lines[%d].text: %d bytes exceed the %d-byte limit", i, len(l.Text), maxTelemetryText))
		}
	}
	if c.tel.mode == "" || c.svc.cfg.Telemetry == nil {
		return nil
	}
	if c.tel.mode != "metrics,logs" {
		b.Lines = nil
	}
	c.svc.cfg.Telemetry.Add(c.agent.InstallID, b, now)
	return nil
}
