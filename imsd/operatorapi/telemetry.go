package operatorapi

import (
	"context"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/byoc-dev/byoc/imsd/errs"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// GetTelemetry returns the app telemetry an install's agent forwarded,
// as this imsd holds it (imsd/telemetry).
func (s *Service) GetTelemetry(ctx context.Context, req *connect.Request[imsv1.GetTelemetryRequest]) (*connect.Response[imsv1.GetTelemetryResponse], error) {
	if req.Msg.Install == "" {
		return nil, s.err(ctx, errs.Field("install", "is required"))
	}
	in, err := s.store.GetInstall(ctx, req.Msg.Install)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	out := &imsv1.GetTelemetryResponse{}
	if s.cfg.Telemetry == nil {
		return connect.NewResponse(out), nil
	}
	snap := s.cfg.Telemetry.Get(in.ID, req.Msg.LogsAfter, s.now())
	out.Setting, out.DroppedSamples, out.DroppedLines = snap.Setting, snap.DroppedSamples, snap.DroppedLines
	if out.Setting == "" {
		out.Setting = "off"
	}
	if !snap.ReceivedAt.IsZero() {
		out.ReceivedTime = timestamppb.New(snap.ReceivedAt)
	}
	for _, m := range snap.Samples {
		out.Samples = append(out.Samples, &imsv1.TelemetrySample{Source: m.Source, Name: m.Name, Labels: m.Labels, Value: m.Value, Time: timestamppb.New(m.Time)})
	}
	for _, l := range snap.Lines {
		out.Lines = append(out.Lines, &imsv1.TelemetryLogLine{Seq: l.Seq, Source: l.Source, File: l.File, Text: l.Text, Time: timestamppb.New(l.Time)})
	}
	return connect.NewResponse(out), nil
}
