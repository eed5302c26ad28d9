package server

import (
	"context"
	"time"

	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// telemetryConfig is the app's telemetry declaration (telemetry.toml) of
// install installID's app revision, for its agent; nil when it declares
// none.
func (s *Server) telemetryConfig(ctx context.Context, installID string) (*agentv1.TelemetryConfig, error) {
	in, err := s.store.GetInstall(ctx, installID)
	if err != nil {
		return nil, err
	}
	app, rev, err := s.engine.InstallRevision(ctx, in)
	if err != nil {
		return nil, err
	}
	out := &agentv1.TelemetryConfig{AppRevision: rev}
	for _, m := range app.Telemetry.Metrics {
		out.Metrics = append(out.Metrics, &agentv1.MetricsSource{Name: m.Name, Url: m.URL, IntervalMs: time.Duration(m.Every()).Milliseconds()})
	}
	for _, l := range app.Telemetry.Logs {
		out.Logs = append(out.Logs, &agentv1.LogSource{Name: l.Name, Path: l.Path, IntervalMs: time.Duration(l.Every()).Milliseconds()})
	}
	return out, nil
}
