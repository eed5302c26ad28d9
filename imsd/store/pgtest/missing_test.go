package pgtest

import (
	"errors"
	"strings"
	"testing"
)

// recordingTB records how missing ended a test instead of ending it.
type recordingTB struct {
	testing.TB
	skipped, failed string
}

func (r *recordingTB) Helper()                      {}
func (r *recordingTB) Skip(args ...any)             { r.skipped = args[0].(string) }
func (r *recordingTB) Fatalf(f string, args ...any) { r.failed = f }

func TestMissingBinariesFailUnderCI(t *testing.T) {
	err := errors.New("pgtest: no PostgreSQL binaries")
	for _, tc := range []struct {
		ci       string
		wantFail bool
	}{{"true", true}, {"", false}, {"false", false}} {
		t.Setenv("CI", tc.ci)
		r := &recordingTB{TB: t}
		missing(r, err)
		if tc.wantFail && (r.failed == "" || r.skipped != "") {
			t.Errorf("CI=%q: failed %q, skipped %q; want a failure", tc.ci, r.failed, r.skipped)
		}
		if !tc.wantFail && (r.skipped == "" || r.failed != "" || !strings.Contains(r.skipped, "no PostgreSQL")) {
			t.Errorf("CI=%q: failed %q, skipped %q; want a skip naming the cause", tc.ci, r.failed, r.skipped)
		}
	}
}
