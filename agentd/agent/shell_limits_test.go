package agent

import (
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

func okOpen() *agentv1.ShellOpen {
	return &agentv1.ShellOpen{SessionId: "ss_abcdefgh12", Operator: "token:sup", Rows: 24, Cols: 80, Term: "xterm-256color",
		WindowBytes: agentproto.DefaultShellWindow}
}

// Everything the operator controls of a support shell is bounded, and a
// refusal names the field.
func TestShellLimits(t *testing.T) {
	if err := checkShellOpen(okOpen()); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", agentproto.MaxShellArgBytes+1)
	for _, tt := range []struct {
		change func(*agentv1.ShellOpen)
		want   string
	}{
		{func(m *agentv1.ShellOpen) { m.SessionId = "../../etc/passwd" }, "session_id"},
		{func(m *agentv1.ShellOpen) { m.SessionId = "ss_ABC12345" }, "session_id"},
		{func(m *agentv1.ShellOpen) { m.Rows = 0 }, "size: 0x80"},
		{func(m *agentv1.ShellOpen) { m.Cols = agentproto.MaxTerminalSide + 1 }, "size"},
		{func(m *agentv1.ShellOpen) { m.Rows = 1 << 20 }, "size"},
		{func(m *agentv1.ShellOpen) { m.Term = "xterm; rm -rf /" }, "term"},
		{func(m *agentv1.ShellOpen) { m.Term = strings.Repeat("x", 65) }, "term"},
		{func(m *agentv1.ShellOpen) { m.Component = "../api" }, "component"},
		{func(m *agentv1.ShellOpen) { m.Command = []string{long} }, "command[0]"},
		{func(m *agentv1.ShellOpen) { m.Command = make([]string, agentproto.MaxShellArgs+1) }, "command: 65 arguments"},
		{func(m *agentv1.ShellOpen) { m.Command = []string{"sh", "a\x00b"} }, "command[1]: contains a NUL"},
		{func(m *agentv1.ShellOpen) { m.Command = []string{""} }, "command[0]: empty"},
		{func(m *agentv1.ShellOpen) {
			m.Command = []string{"sh", strings.Repeat("y", 4096), strings.Repeat("y", 4096), strings.Repeat("y", 4096), strings.Repeat("y", 4096)}
		}, "command: 16386 bytes, at most 16384"},
		{func(m *agentv1.ShellOpen) { m.WindowBytes = 0 }, "window_bytes"},
		{func(m *agentv1.ShellOpen) { m.WindowBytes = agentproto.MaxShellWindow + 1 }, "window_bytes"},
		{func(m *agentv1.ShellOpen) { m.Operator = strings.Repeat("o", 257) }, "operator"},
		{func(m *agentv1.ShellOpen) { m.Operator = "token:sup\x1b]0;owned\x07\x1b[2J" }, "operator: "},
		{func(m *agentv1.ShellOpen) { m.Operator = "token:sup\nforged line" }, "operator: "},
		{func(m *agentv1.ShellOpen) { m.Operator = "token:\xff" }, "operator: "},
	} {
		m := okOpen()
		tt.change(m)
		if err := checkShellOpen(m); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("CheckShellOpen: %v, want %q", err, tt.want)
		}
	}
	for _, tt := range []struct {
		m    *agentv1.ShellInput
		want string
	}{
		{&agentv1.ShellInput{Data: make([]byte, agentproto.MaxShellData+1)}, "data: 32769 bytes"},
		{&agentv1.ShellInput{Rows: 24}, "resize: 24x0"},
		{&agentv1.ShellInput{Rows: 65535, Cols: 65535}, "resize"},
		{&agentv1.ShellInput{CreditBytes: agentproto.MaxShellWindow + 1}, "credit_bytes"},
	} {
		if err := checkShellInput(tt.m); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("CheckShellInput: %v, want %q", err, tt.want)
		}
	}
	for _, ok := range []*agentv1.ShellInput{{Data: make([]byte, agentproto.MaxShellData)}, {Rows: 1000, Cols: 1}, {CreditBytes: 100}, {Close: true}} {
		if err := checkShellInput(ok); err != nil {
			t.Errorf("CheckShellInput(%v): %v", ok, err)
		}
	}
	if agentproto.ShellCost(1) != agentproto.MinShellCost || agentproto.ShellCost(10000) != 10000 {
		t.Fatal("ShellCost")
	}
}
