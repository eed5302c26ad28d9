package release

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails a passing run that leaves goroutines behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
