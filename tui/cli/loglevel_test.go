package cli

import (
	"strings"
	"testing"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// byoc job logs --level shows a plugin's leveled lines (sdk.NewLogger) at
// the level and above; a line without a level counts as info (issue 29:
// plugin logs had no levels).
func TestJobLogsLevel(t *testing.T) {
	f, _ := setup(t)
	line := func(seq int64, text string) *imsv1.LogLine {
		return &imsv1.LogLine{Attempt: 1, Seq: seq, Stream: imsv1.LogStream_LOG_STREAM_STDOUT, Text: text, Time: testTime}
	}
	f.logCalls = [][]*imsv1.StreamJobLogsResponse{{{Lines: []*imsv1.LogLine{
		line(1, "[DEBUG] kv: starting: step=1"), line(2, "plain"), line(3, "[WARN]  kv: disk low: free=3"), line(4, "[ERROR] kv: failed"),
	}}}}
	if r := mustRun(t, "job", "logs", "job_1", "--level", "warn"); r.stdout != "[WARN]  kv: disk low: free=3\n[ERROR] kv: failed\n" {
		t.Errorf("--level warn: %q", r.stdout)
	}
	if r := mustRun(t, "job", "logs", "job_1", "--level", "info"); !strings.HasPrefix(r.stdout, "plain\n") {
		t.Errorf("--level info: %q", r.stdout)
	}
	if r := byoc(t, "job", "logs", "job_1", "--level", "loud"); r.code != exitUsage || !strings.Contains(r.stderr, `--level "loud": want one of trace, debug, info, warn, error`) {
		t.Errorf("--level loud: %d %q", r.code, r.stderr)
	}
}
