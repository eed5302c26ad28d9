package cli

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// GetTelemetry answers what a hostile app (or an end user whose input it
// logs) could make an agent forward: a UTF-8 metric name and label name
// carrying a quote, a brace and a newline, and log lines with terminal
// escape sequences.
func (f *fakeOperator) GetTelemetry(ctx context.Context, req *connect.Request[imsv1.GetTelemetryRequest]) (*connect.Response[imsv1.GetTelemetryResponse], error) {
	if err := f.auth(req.Header()); err != nil {
		return nil, err
	}
	at := timestamppb.New(time.Unix(1800000000, 0))
	return connect.NewResponse(&imsv1.GetTelemetryResponse{Setting: "metrics,logs", ReceivedTime: at,
		Samples: []*imsv1.TelemetrySample{
			{Source: "api", Name: "up", Value: 1, Time: at},
			{Source: "api", Name: "x\"} 1 0\nforged_total{source=\"api\"} 666 0\n#", Labels: map[string]string{"a\nforged 1": "v\x1b[2J"}, Value: 2, Time: at},
		},
		Lines: []*imsv1.TelemetryLogLine{{Seq: 1, Source: "app", Text: "login ok \x1b]52;c;ZWNobyBwd25lZA==\x07\x1b[2J done", Time: at}},
	}), nil
}

// ListSupportRecordings answers a recording whose operator (its title,
// which the customer's agent wrote) carries terminal escape sequences.
func (f *fakeOperator) ListSupportRecordings(ctx context.Context, req *connect.Request[imsv1.ListSupportRecordingsRequest]) (*connect.Response[imsv1.ListSupportRecordingsResponse], error) {
	if err := f.auth(req.Header()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&imsv1.ListSupportRecordingsResponse{Recordings: []*imsv1.SupportRecording{
		{SessionId: "ss_1", Operator: "ops\x1b]0;owned\x07\x1b[31m", Size: 10, Sha256: "ab"}}}), nil
}

// byocOnTerminalOut runs the command line as if standard output were a
// terminal.
func byocOnTerminalOut(tb testing.TB, args ...string) result {
	tb.Helper()
	var stdout, stderr bytes.Buffer
	a := &app{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, getenv: os.Getenv, now: time.Now,
		terminal: func(io.Writer) bool { return true }, stdinTerminal: func() bool { return false }}
	code := a.run(context.Background(), args)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// byoc telemetry metrics writes one line per series whatever the agent
// forwarded: a metric or label name that is not a Prometheus legacy name
// is quoted (as Prometheus 3 writes UTF-8 names), so a name cannot end
// its line and forge another series, nor carry an escape sequence.
func TestTelemetryMetricsNamesCannotForge(t *testing.T) {
	setup(t)
	r := mustRun(t, "telemetry", "metrics", "acme")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want the header and two series:\n%s", len(lines), r.stdout)
	}
	for _, l := range lines[1:] {
		if strings.HasPrefix(l, "forged") || strings.ContainsAny(l, "\x1b") {
			t.Errorf("forged or raw line: %q", l)
		}
	}
	if lines[1] != `up{source="api"} 1 1800000000000` {
		t.Errorf("plain series: %q", lines[1])
	}
	if !strings.HasPrefix(lines[2], `{"x\"} 1 0\nforged_total`) {
		t.Errorf("UTF-8 name not quoted: %q", lines[2])
	}
}

// byoc telemetry logs on a terminal shows a line's escape sequences
// instead of sending them to the terminal (an OSC 52 would write the
// operator's clipboard); in a pipe the text is exact.
func TestTelemetryLogsCleanOnTerminal(t *testing.T) {
	setup(t)
	r := byocOnTerminalOut(t, "telemetry", "logs", "acme")
	if r.code != 0 || strings.Contains(r.stdout, "\x1b") || !strings.Contains(r.stdout, "login ok") || !strings.Contains(r.stdout, "done") {
		t.Fatalf("on a terminal: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	if r := mustRun(t, "telemetry", "logs", "acme"); !strings.Contains(r.stdout, "\x1b]52;") {
		t.Fatalf("in a pipe the text is exact: %q", r.stdout)
	}
}

// A table cell holds what an agent wrote (a kept recording's operator
// comes from its title): its escape sequences are shown, not obeyed.
func TestTableCellsCleaned(t *testing.T) {
	setup(t)
	r := mustRun(t, "support", "recordings", "acme")
	if strings.Contains(r.stdout, "\x1b") || strings.Contains(r.stdout, "\a") || !strings.Contains(r.stdout, "ops") {
		t.Fatalf("support recordings: %q", r.stdout)
	}
}

// byoc job get writes what the job's code returned (its error and
// outputs: the vendor's code chose them) as fields: escape sequences are
// shown, not obeyed, and a newline cannot forge a field, on a terminal
// or not.
func TestFieldsCleaned(t *testing.T) {
	f, _ := setup(t)
	f.jobs = map[string]*imsv1.Job{"job_x": {Id: "job_x", InstallId: "ins_1", ComponentType: "action", Operation: "apply",
		State: imsv1.JobState_JOB_STATE_FAILED, Error: "boom \x1b]52;c;ZWNobyBwd25lZA==\x07\x1b[2J\nState:  succeeded",
		Outputs: map[string]string{"k\x1b[31m": "v\x1b]0;owned\x07"}}}
	for _, r := range []result{mustRun(t, "job", "get", "job_x"), byocOnTerminalOut(t, "job", "get", "job_x")} {
		if r.code != 0 || strings.ContainsAny(r.stdout, "\x1b\a") || !strings.Contains(r.stdout, "boom") ||
			strings.Count(r.stdout, "\nState:") != 1 {
			t.Fatalf("job get: exit %d %q %s", r.code, r.stdout, r.stderr)
		}
	}
}

// An error that quotes what a workflow, a release or an agent wrote
// (`byoc action run --wait` ends with the run's error) shows its escape
// sequences on a terminal, not obeys them, and keeps its line breaks.
func TestErrorsCleanedOnTerminal(t *testing.T) {
	var stderr bytes.Buffer
	a := &app{stderr: &stderr, terminal: func(io.Writer) bool { return true }}
	a.printError("run ar_1 failed: boom \x1b]52;c;ZWNobyBwd25lZA==\x07\x1b[2J\nsecond line", exitError, "hint \x1b[31m")
	if got := stderr.String(); strings.ContainsAny(got, "\x1b\a") || !strings.Contains(got, "boom") || !strings.Contains(got, "\nsecond line\nhint") {
		t.Fatalf("on a terminal: %q", got)
	}
	stderr.Reset()
	a.terminal = func(io.Writer) bool { return false }
	a.printError("exact \x1b[2J", exitError, "")
	if got := stderr.String(); got != "error: exact \x1b[2J\n" {
		t.Fatalf("piped: %q", got)
	}
}
