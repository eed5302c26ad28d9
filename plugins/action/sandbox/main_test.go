package sandbox

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails a passing run that leaves goroutines behind.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "hold-step" {
		holdStep() // a plugin-like process for the sweep tests
	}
	goleak.VerifyTestMain(m)
}
