package agent

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// What the operator controls of a support shell is checked here, on the
// customer's side, whatever imsd checked (rpc/agentproto's limits).

// checkShellOpen checks a ShellOpen against the limits.
func checkShellOpen(m *agentv1.ShellOpen) error {
	if err := agentproto.CheckShellSessionID(m.GetSessionId()); err != nil {
		return err
	}
	if err := agentproto.CheckShellComponent(m.GetComponent()); err != nil {
		return err
	}
	if len(m.GetOperator()) > 256 {
		return fmt.Errorf("operator: %d bytes, at most 256", len(m.GetOperator()))
	}
	// The operator's name is shown to the customer (agentd session list,
	// the recording's title): text only, no escape sequence for their
	// terminal.
	if op := m.GetOperator(); !utf8.ValidString(op) || strings.ContainsFunc(op, unicode.IsControl) {
		return fmt.Errorf("operator: %q is not UTF-8 text without control characters", op)
	}
	if err := agentproto.CheckShellCommand(m.GetCommand()); err != nil {
		return err
	}
	if err := agentproto.CheckTerminalSize("size", m.GetRows(), m.GetCols()); err != nil {
		return err
	}
	if err := agentproto.CheckShellTerm(m.GetTerm()); err != nil {
		return err
	}
	if w := m.GetWindowBytes(); w < agentproto.MaxShellData || w > agentproto.MaxShellWindow {
		return fmt.Errorf("window_bytes: %d: must be %d to %d", w, agentproto.MaxShellData, agentproto.MaxShellWindow)
	}
	return nil
}

// checkShellInput checks a ShellInput against the limits.
func checkShellInput(m *agentv1.ShellInput) error {
	if len(m.GetData()) > agentproto.MaxShellData {
		return fmt.Errorf("data: %d bytes, at most %d", len(m.GetData()), agentproto.MaxShellData)
	}
	if m.GetRows() != 0 || m.GetCols() != 0 {
		if err := agentproto.CheckTerminalSize("resize", m.GetRows(), m.GetCols()); err != nil {
			return err
		}
	}
	if m.GetCreditBytes() > agentproto.MaxShellWindow {
		return fmt.Errorf("credit_bytes: %d, at most %d", m.GetCreditBytes(), agentproto.MaxShellWindow)
	}
	return nil
}
