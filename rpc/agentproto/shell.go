package agentproto

import (
	"fmt"
	"regexp"
)

// Limits on a support shell (ShellOpen, ShellInput, ShellEvent): what an
// operator controls is bounded on imsd's side and again on the agent's.
const (
	// MaxShellData is the most bytes of keystrokes or output in one
	// message.
	MaxShellData = 32 << 10
	// MaxShellWindow is the most output bytes an agent may have sent and
	// not been given credit for; DefaultShellWindow is what imsd asks.
	MaxShellWindow     = 1 << 20
	DefaultShellWindow = 256 << 10
	// MaxTerminalSide bounds a terminal's rows and columns.
	MaxTerminalSide = 1000
	// MaxShellArgs and MaxShellArgBytes bound the command, MaxShellCommand
	// its bytes in all.
	MaxShellArgs     = 64
	MaxShellArgBytes = 4 << 10
	MaxShellCommand  = 16 << 10
	// MaxSessionRecording is the largest recording of a session imsd
	// keeps a copy of (agentd --session-recordings-to-vendor); the agent
	// sends none larger.
	MaxSessionRecording = 16 << 20
	// MaxRecordingsResent is the most recordings the agent sends at a
	// time that imsd has not confirmed keeping (RecordingKept); imsd
	// takes twice that on one stream.
	MaxRecordingsResent = 8
)

var (
	shellTermRE      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$`)
	shellSessionRE   = regexp.MustCompile(`^ss_[a-z0-9]{8,40}$`)
	shellComponentRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9_-]{0,62})$`)
)

// CheckShellTerm checks a terminal type (TERM): letters, digits and
// ._+-, at most 64.
func CheckShellTerm(term string) error {
	if term != "" && !shellTermRE.MatchString(term) {
		return fmt.Errorf("term: %q is not a terminal type", term)
	}
	return nil
}

// CheckShellComponent checks a component name.
func CheckShellComponent(name string) error {
	if name != "" && !shellComponentRE.MatchString(name) {
		return fmt.Errorf("component: %q is not a component name", name)
	}
	return nil
}

// CheckTerminalSize checks a terminal size: both sides 1 to
// MaxTerminalSide.
func CheckTerminalSize(field string, rows, cols uint32) error {
	if rows < 1 || rows > MaxTerminalSide || cols < 1 || cols > MaxTerminalSide {
		return fmt.Errorf("%s: %dx%d: rows and cols must each be 1 to %d", field, rows, cols, MaxTerminalSide)
	}
	return nil
}

// CheckShellSessionID checks a session id (ss_ and 8 to 40 lower-case
// letters or digits: it names the recording's file).
func CheckShellSessionID(id string) error {
	if !shellSessionRE.MatchString(id) {
		return fmt.Errorf("session_id: %q is not a session id (ss_ and 8 to 40 lower-case letters or digits)", id)
	}
	return nil
}

// CheckShellCommand checks a shell's command: at most MaxShellArgs
// arguments of MaxShellArgBytes each, MaxShellCommand bytes in all, no NUL.
func CheckShellCommand(cmd []string) error {
	if len(cmd) > MaxShellArgs {
		return fmt.Errorf("command: %d arguments, at most %d", len(cmd), MaxShellArgs)
	}
	total := 0
	for i, a := range cmd {
		if len(a) > MaxShellArgBytes {
			return fmt.Errorf("command[%d]: %d bytes, at most %d", i, len(a), MaxShellArgBytes)
		}
		for j := 0; j < len(a); j++ {
			if a[j] == 0 {
				return fmt.Errorf("command[%d]: contains a NUL byte", i)
			}
		}
		total += len(a)
	}
	if total > MaxShellCommand {
		return fmt.Errorf("command: %d bytes, at most %d", total, MaxShellCommand)
	}
	if len(cmd) > 0 && cmd[0] == "" {
		return fmt.Errorf("command[0]: empty")
	}
	return nil
}

// MinShellCost is the least flow-control credit one output message
// spends, however short: it bounds the messages in flight too.
const MinShellCost = 256

// ShellCost is the credit an output message of n bytes spends.
func ShellCost(n int) int64 { return int64(max(n, MinShellCost)) }
