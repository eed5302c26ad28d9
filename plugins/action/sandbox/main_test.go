package sandbox

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain serves the test binary as a plugin-like process when run as
// "hold-step" (sweep_test.go) or as a namespace sandbox's init, and otherwise fails a passing run that
// leaves goroutines behind.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == InitArg {
		os.Exit(InitMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "hold-step" {
		holdStep()
	}
	goleak.VerifyTestMain(m)
}
