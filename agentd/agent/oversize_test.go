package agent

import (
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// A log batch stays under maxBatchBytes of text (imsd reads 16 MiB a
// message) and under maxBatch lines, and always takes at least one line.
func TestLogBatchesBoundedByBytes(t *testing.T) {
	long := strings.Repeat("x", MaxLineBytes)
	var lines []*agentv1.LogLine
	for range 600 {
		lines = append(lines, &agentv1.LogLine{Text: long})
	}
	for from := 0; from < len(lines); {
		end := batchEnd(lines, from)
		size := 0
		for _, l := range lines[from:end] {
			size += len(l.Text)
		}
		if end <= from || size > maxBatchBytes || end-from > maxBatch {
			t.Fatalf("batch [%d, %d): %d bytes", from, end, size)
		}
		from = end
	}
	short := make([]*agentv1.LogLine, 1200)
	for i := range short {
		short[i] = &agentv1.LogLine{Text: "a"}
	}
	if end := batchEnd(short, 0); end != maxBatch {
		t.Fatalf("short lines: a batch of %d, want %d", end, maxBatch)
	}
	huge := []*agentv1.LogLine{{Text: strings.Repeat("y", maxBatchBytes+1)}, {Text: "z"}}
	if end := batchEnd(huge, 0); end != 1 {
		t.Fatalf("a line over the bound alone: a batch of %d, want 1", end)
	}
}

// A result over MaxResultBytes becomes a failure that fits, names the
// largest parts and keeps the plugin's error, cut.
func TestOversizeResult(t *testing.T) {
	outputs := map[string]string{"small": "1"}
	for _, k := range []string{"a", "b", "c"} {
		outputs[k] = strings.Repeat(k, 4<<20)
	}
	r := &agentv1.JobResult{JobId: "job_1", FencingToken: 7, Outcome: agentv1.Outcome_OUTCOME_SUCCEEDED,
		Outputs: outputs, Error: strings.Repeat("e", 100<<10), PlanDigest: "sha256:x",
		PlannedChanges: []*agentv1.PlannedChange{{Address: "null_resource.x"}}}
	small := oversizeResult(r, proto.Size(r))
	if small.Outcome != agentv1.Outcome_OUTCOME_FAILED || small.JobId != "job_1" || small.FencingToken != 7 ||
		len(small.Outputs) != 0 || len(small.PlannedChanges) != 0 || small.PlanDigest != "" || proto.Size(small) > 16<<10 {
		t.Fatalf("the small result: %v outputs %d changes %d, %d bytes", small.Outcome, len(small.Outputs), len(small.PlannedChanges), proto.Size(small))
	}
	for _, want := range []string{"the operation succeeded but the job's result is 12.1 MiB, over the 8.0 MiB",
		"4 outputs, 1 planned changes", "the largest: outputs.a 4.0 MiB, outputs.b 4.0 MiB, outputs.c 4.0 MiB, planned_changes[0] (null_resource.x)",
		"the plugin's error: eee", "bytes cut)"} {
		if !strings.Contains(small.Error, want) {
			t.Errorf("the error %.300q… lacks %q", small.Error, want)
		}
	}
	for _, in := range []string{strings.Repeat("é", 40000), strings.Repeat("x", 70000)} {
		if got := cutText(in, MaxLineBytes); len(got) > MaxLineBytes || !utf8.ValidString(got) || !strings.HasSuffix(got, " bytes cut)") {
			t.Errorf("cutText of %d bytes: %d bytes, valid %v, ends %q", len(in), len(got), utf8.ValidString(got), got[len(got)-20:])
		}
	}
	r.Outcome = agentv1.Outcome_OUTCOME_TIMED_OUT
	if small := oversizeResult(r, proto.Size(r)); small.Outcome != agentv1.Outcome_OUTCOME_TIMED_OUT || strings.Contains(small.Error, "succeeded") {
		t.Fatalf("a timed-out job's oversized result: %v %q", small.Outcome, small.Error[:100])
	}
}
