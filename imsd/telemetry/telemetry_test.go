package telemetry

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// The store keeps the newest sample per series and the newest lines,
// within its bounds, and forgets an install whose customer turned
// telemetry off.
func TestStoreBounds(t *testing.T) {
	now := time.Unix(1800000000, 0)
	s := New(Config{MaxSeries: 3, MaxLines: 4, MaxInstalls: 2})
	s.SetSetting("ins_1", "metrics,logs")
	batch := &agentv1.TelemetryBatch{DroppedSamples: 5}
	for i := range 5 {
		batch.Samples = append(batch.Samples, &agentv1.MetricSample{Source: "api", Name: "x", Labels: map[string]string{"i": fmt.Sprint(i)}, Value: float64(i), Time: timestamppb.New(now)})
	}
	for i := range 6 {
		batch.Lines = append(batch.Lines, &agentv1.TelemetryLine{Source: "app", Text: fmt.Sprint("line ", i), Time: timestamppb.New(now)})
	}
	s.Add("ins_1", batch, now)
	// The same series again: replaced, not added.
	s.Add("ins_1", &agentv1.TelemetryBatch{DroppedSamples: 5, Samples: []*agentv1.MetricSample{{Source: "api", Name: "x", Labels: map[string]string{"i": "0"}, Value: 42, Time: timestamppb.New(now)}}}, now)
	got := s.Get("ins_1", 0, now)
	if len(got.Samples) != 3 || got.Samples[0].Value != 42 || got.DroppedSamples != 5+2 {
		t.Errorf("samples %+v, dropped %d; want 3 series, the first 42, 7 dropped", got.Samples, got.DroppedSamples)
	}
	if len(got.Lines) != 4 || got.Lines[0].Text != "line 2" || got.Lines[3].Seq != 6 {
		t.Errorf("lines %+v; want lines 2-5", got.Lines)
	}
	if l := s.Get("ins_1", 5, now).Lines; len(l) != 1 || l[0].Text != "line 5" {
		t.Errorf("after 5: %+v", l)
	}
	// A third install pushes out the one heard from longest ago.
	s.Add("ins_2", &agentv1.TelemetryBatch{}, now.Add(time.Second))
	s.Add("ins_3", &agentv1.TelemetryBatch{}, now.Add(2*time.Second))
	if got := s.Get("ins_1", 0, now); len(got.Samples) != 0 {
		t.Errorf("ins_1 still held beyond MaxInstalls: %+v", got)
	}
	s.SetSetting("ins_3", "off")
	if got := s.Get("ins_3", 0, now); got.Setting != "off" || !got.ReceivedAt.IsZero() {
		t.Errorf("turned off: %+v", got)
	}
}

// What imsd holds of an install is bounded in bytes, not only in series
// and lines: an agent (a hostile one, or an app whose metrics carry huge
// label values: the agent's scrape may be 4 MiB) cannot make each of the
// 10,000 series or 2,000 lines megabytes. A sample over MaxSampleBytes,
// and a line whose source and file are over it, is dropped and counted;
// the others are kept.
func TestStoreSampleAndLineSize(t *testing.T) {
	now := time.Unix(1800000000, 0)
	s := New(Config{})
	s.SetSetting("ins_1", "metrics,logs")
	big := strings.Repeat("x", 1<<20)
	b := &agentv1.TelemetryBatch{
		Samples: []*agentv1.MetricSample{
			{Source: "api", Name: "up", Value: 1, Time: timestamppb.New(now)},
			{Source: "api", Name: "huge_label", Labels: map[string]string{"v": big}, Time: timestamppb.New(now)},
			{Source: "api", Name: big, Time: timestamppb.New(now)},
			{Source: big, Name: "x", Time: timestamppb.New(now)},
		},
		Lines: []*agentv1.TelemetryLine{
			{Source: "app", File: "/var/log/app.log", Text: "ok", Time: timestamppb.New(now)},
			{Source: "app", File: big, Text: "x", Time: timestamppb.New(now)},
		},
	}
	s.Add("ins_1", b, now)
	got := s.Get("ins_1", 0, now)
	if len(got.Samples) != 1 || got.Samples[0].Name != "up" || got.DroppedSamples != 3 {
		t.Errorf("samples %d (dropped %d); want up only, 3 dropped", len(got.Samples), got.DroppedSamples)
	}
	if len(got.Lines) != 1 || got.Lines[0].Text != "ok" || got.DroppedLines != 1 {
		t.Errorf("lines %d (dropped %d); want the small one, 1 dropped", len(got.Lines), got.DroppedLines)
	}
}
