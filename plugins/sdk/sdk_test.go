package sdk_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/plugins/sdk/sdktest"
)

// fake is a Plugin whose Apply does what the test says.
type fake struct {
	apply func(context.Context, *sdk.ApplyRequest) (*sdk.ApplyResponse, error)
}

func (fake) Describe(context.Context, *sdk.DescribeRequest) (*sdk.DescribeResponse, error) {
	return &sdk.DescribeResponse{Type: "fake", Version: "1", ConfigSchema: `{"type":"object"}`}, nil
}
func (fake) Validate(_ context.Context, req *sdk.ValidateRequest) (*sdk.ValidateResponse, error) {
	if req.Config["bad"] != nil {
		return &sdk.ValidateResponse{Diagnostics: []sdk.Diagnostic{{Field: "bad", Message: "no"}}}, nil
	}
	return &sdk.ValidateResponse{}, nil
}
func (fake) Plan(context.Context, *sdk.PlanRequest) (*sdk.PlanResponse, error) {
	return &sdk.PlanResponse{Changes: "+1"}, nil
}
func (f fake) Apply(ctx context.Context, req *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
	return f.apply(ctx, req)
}
func (fake) Destroy(context.Context, *sdk.DestroyRequest) (*sdk.DestroyResponse, error) {
	return nil, nil
}

func TestRun(t *testing.T) {
	tests := []struct {
		name  string
		apply func(context.Context, *sdk.ApplyRequest) (*sdk.ApplyResponse, error)
		want  sdk.Result
		logs  []string
	}{
		{"request fields reach the plugin", func(_ context.Context, r *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
			r.Log.Stdout(r.Job.JobID + " " + r.Job.WorkDir + " " + r.Job.StateDir + " " + r.Job.Timeout.String())
			r.Log.Stderr(r.Env["E"])
			r.Log.System(r.Config["n"].(map[string]any)["k"].(string))
			return &sdk.ApplyResponse{Outputs: map[string]string{"a": "b"}}, nil
		}, sdk.Result{Outputs: map[string]string{"a": "b"}}, []string{"stdout:j1 /w /s 1m0s", "stderr:e", "system:v"}},
		{"error without exit code", func(context.Context, *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
			return nil, errors.New("boom")
		}, sdk.Result{ExitCode: 1, Error: "boom"}, nil},
		{"error keeps exit code", func(context.Context, *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
			return &sdk.ApplyResponse{ExitCode: 4}, errors.New("boom")
		}, sdk.Result{ExitCode: 4, Error: "boom"}, nil},
		{"invalid utf-8 is replaced", func(_ context.Context, r *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
			r.Log.Stdout("a\xffb")
			return nil, nil
		}, sdk.Result{}, []string{"stdout:a\uFFFDb"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := sdktest.Start(t, fake{apply: tt.apply})
			var logs []string
			res, err := c.Run(t.Context(), sdk.OpApply, &sdk.RunRequest{
				Job:    sdk.JobContext{JobID: "j1", WorkDir: "/w", StateDir: "/s", Timeout: time.Minute},
				Config: map[string]any{"n": map[string]any{"k": "v"}},
				Env:    map[string]string{"E": "e"},
			}, func(e sdk.LogEvent) {
				if e.Time.IsZero() {
					t.Error("log event without time")
				}
				logs = append(logs, e.Stream.String()+":"+e.Text)
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != tt.want.ExitCode || res.Error != tt.want.Error || len(res.Outputs) != len(tt.want.Outputs) {
				t.Errorf("result = %+v, want %+v", res, tt.want)
			}
			if !slices.Equal(logs, tt.logs) {
				t.Errorf("logs = %q, want %q", logs, tt.logs)
			}
		})
	}
}

// A panic in an operation fails it, and its stack trace, down to the
// plugin's own function, is in the log.
func TestPanicStackInLog(t *testing.T) {
	c := sdktest.Start(t, fake{apply: func(context.Context, *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
		panic("assignment to entry in nil map")
	}})
	var logs []string
	res, err := c.Run(t.Context(), sdk.OpApply, &sdk.RunRequest{}, func(e sdk.LogEvent) {
		logs = append(logs, e.Stream.String()+":"+e.Text)
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 1 || res.Error != "plugin panic: assignment to entry in nil map (the stack trace is in the job log)" {
		t.Errorf("result = %+v", res)
	}
	all := strings.Join(logs, "\n")
	for _, want := range []string{"system:plugin panic: assignment to entry in nil map", "system:goroutine ", "sdk_test.TestPanicStackInLog.func1", "sdk_test.go:"} {
		if !strings.Contains(all, want) {
			t.Errorf("log lacks %q:\n%s", want, all)
		}
	}
}

func TestClient(t *testing.T) {
	c := sdktest.Start(t, fake{})
	d, err := c.Describe(t.Context())
	if err != nil || d.Type != "fake" || d.Protocol != sdk.Protocol {
		t.Errorf("Describe = %+v, %v", d, err)
	}
	v, err := c.Validate(t.Context(), map[string]any{"bad": true})
	if err != nil || len(v.Diagnostics) != 1 || v.Diagnostics[0].Field != "bad" {
		t.Errorf("Validate = %+v, %v", v, err)
	}
	res, err := c.Run(t.Context(), sdk.OpPlan, nil, nil)
	if err != nil || res.Changes != "+1" {
		t.Errorf("plan = %+v, %v", res, err)
	}
	res, err = c.Run(t.Context(), sdk.OpDestroy, nil, nil)
	if err != nil || res.Err() != nil {
		t.Errorf("destroy with nil response = %+v, %v", res, err)
	}
	if _, err := c.Run(t.Context(), "frobnicate", nil, nil); err == nil || !strings.Contains(err.Error(), "unknown operation") {
		t.Errorf("unknown op error = %v", err)
	}
	if _, err := c.Validate(t.Context(), map[string]any{"ch": make(chan int)}); err == nil {
		t.Errorf("Validate accepted a config that is not JSON-like")
	}
}

func TestPrintDescription(t *testing.T) {
	var buf bytes.Buffer
	if err := sdk.PrintDescription(t.Context(), &buf, fake{}); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, buf.String())
	}
	if got["type"] != "fake" || got["config_schema"].(map[string]any)["type"] != "object" {
		t.Errorf("description = %s", buf.String())
	}
}

// reserved is a plugin whose schema declares a key the agent takes out of
// every config.
type reserved struct{ fake }

func (reserved) Describe(context.Context, *sdk.DescribeRequest) (*sdk.DescribeResponse, error) {
	return &sdk.DescribeResponse{Type: "reserved", Version: "1",
		ConfigSchema: `{"type":"object","properties":{"name":{"type":"string"},"sensitive":{"type":"boolean"}}}`}, nil
}

// A schema declaring a reserved key is refused by describe and by the
// plugin's Describe call, naming the key (issue 29: the agent stripped
// such a field and redacted its value, and nothing said so).
func TestDescribeRefusesReservedKey(t *testing.T) {
	const want = `config schema: properties: "sensitive" is a reserved config key`
	var buf bytes.Buffer
	if err := sdk.PrintDescription(t.Context(), &buf, reserved{}); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("describe: %v, want %q", err, want)
	}
	c := sdktest.StartRaw(t, reserved{})
	if _, err := c.Negotiate(t.Context()); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("negotiate: %v, want %q", err, want)
	}
}

// NewLogger writes leveled, structured lines into the job's log, whose
// level LogLevel reads back (issue 29: logging had no levels or fields).
func TestNewLoggerLevels(t *testing.T) {
	c := sdktest.Start(t, fake{apply: func(_ context.Context, req *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
		log := sdk.NewLogger(req.Log, "fake")
		log.Debug("starting", "step", 1)
		log.Warn("disk low", "free", 3, "path", "/data")
		return &sdk.ApplyResponse{}, nil
	}})
	_, logs := sdktest.Run(t, c, sdk.OpApply, &sdk.RunRequest{})
	var got []string
	for _, e := range logs {
		got = append(got, sdk.LogLevel(e.Text)+" | "+e.Text)
	}
	want := []string{"debug | [DEBUG] fake: starting: step=1", "warn | [WARN]  fake: disk low: free=3 path=/data"}
	if !slices.Equal(got, want) {
		t.Errorf("lines:\n%q\nwant:\n%q", got, want)
	}
	if l := sdk.LogLevel("plain line"); l != "" {
		t.Errorf("LogLevel of a plain line = %q", l)
	}
}
