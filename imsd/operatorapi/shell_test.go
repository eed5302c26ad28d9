package operatorapi

import (
	"errors"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// imsd bounds what the operator controls of a support shell before it
// reaches the agent (which checks again), naming the field.
func TestSupportShellLimits(t *testing.T) {
	ok := func() *imsv1.SupportShellOpen {
		return &imsv1.SupportShellOpen{Size: &imsv1.TerminalSize{Rows: 24, Cols: 80}, Term: "xterm", Component: "api", Command: []string{"psql"}}
	}
	if err := checkShellOpen(ok()); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		change func(*imsv1.SupportShellOpen)
		field  string
	}{
		{func(o *imsv1.SupportShellOpen) { o.Size = nil }, "open.size"},
		{func(o *imsv1.SupportShellOpen) { o.Size.Rows = 1001 }, "open.size"},
		{func(o *imsv1.SupportShellOpen) { o.Component = "API/../x" }, "open.component"},
		{func(o *imsv1.SupportShellOpen) { o.Term = "a b" }, "open.term"},
		{func(o *imsv1.SupportShellOpen) { o.Command = make([]string, 65) }, "open.command"},
		{func(o *imsv1.SupportShellOpen) {
			o.Command = []string{strings.Repeat("x", agentproto.MaxShellArgBytes+1)}
		}, "open.command[0]"},
	} {
		o := ok()
		tt.change(o)
		err := checkShellOpen(o)
		var e *errs.Error
		if !errors.As(err, &e) || e.Field != tt.field {
			t.Errorf("checkShellOpen: %v, want a refusal of %s", err, tt.field)
		}
	}
	if err := checkShellOpen(nil); err == nil {
		t.Error("no open: accepted")
	}
	for _, tt := range []struct {
		m     *imsv1.SupportShellRequest
		field string
	}{
		{&imsv1.SupportShellRequest{Input: make([]byte, agentproto.MaxShellData+1)}, "input"},
		{&imsv1.SupportShellRequest{Resize: &imsv1.TerminalSize{Rows: 0, Cols: 80}}, "resize"},
		{&imsv1.SupportShellRequest{Resize: &imsv1.TerminalSize{Rows: 24, Cols: 5000}}, "resize"},
		{&imsv1.SupportShellRequest{Open: ok()}, "open"},
	} {
		err := checkShellInput(tt.m)
		var e *errs.Error
		if !errors.As(err, &e) || e.Field != tt.field {
			t.Errorf("checkShellInput: %v, want a refusal of %s", err, tt.field)
		}
	}
	if err := checkShellInput(&imsv1.SupportShellRequest{Input: []byte("ls\r"), Resize: &imsv1.TerminalSize{Rows: 40, Cols: 100}}); err != nil {
		t.Error(err)
	}
}
