package cli

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"
)

// An ad-hoc action run sends one fresh idempotency key per invocation and
// retries transient failures with that same key, a bounded number of
// times; other failures are not retried.
func TestActionRunRetriesWithOneKey(t *testing.T) {
	f, _ := setup(t)
	f.enqueueFail, f.enqueueCode = 2, connect.CodeUnavailable
	r := mustRun(t, "action", "run", "shop-acme", "--", "echo", "hi")
	if r.stdout != "job_1\n" {
		t.Errorf("stdout = %q, want the job id", r.stdout)
	}
	if f.enqueueCalls != 3 {
		t.Fatalf("%d EnqueueJob calls, want 3 (two failures, one success)", f.enqueueCalls)
	}
	key := f.enqueueKeys[0]
	if !keyRE.MatchString(key) || slices.ContainsFunc(f.enqueueKeys, func(k string) bool { return k != key }) {
		t.Fatalf("keys sent %q, want one valid key repeated", f.enqueueKeys)
	}
	if strings.Count(r.stderr, "retrying in") != 2 {
		t.Errorf("stderr does not say it retried twice:\n%s", r.stderr)
	}

	// A second invocation is another request: another key.
	mustRun(t, "action", "run", "shop-acme", "--", "echo", "hi")
	if got := f.enqueueKeys[3]; got == key || !keyRE.MatchString(got) {
		t.Errorf("second invocation sent key %q, want a fresh one (first %q)", got, key)
	}

	// A batch carries the key on the request, none on its jobs.
	f.enqueueFail, f.enqueueCode = 1, connect.CodeDeadlineExceeded
	f.enqueued = nil
	mustRun(t, "action", "run", "a", "b", "--", "echo", "hi")
	batchKeys := f.enqueueKeys[4:]
	if len(batchKeys) != 2 || batchKeys[0] != batchKeys[1] || batchKeys[0] == "" {
		t.Errorf("EnqueueJobs keys %q, want one key sent twice", batchKeys)
	}
	for _, j := range f.enqueued {
		if j.GetIdempotencyKey() != "" {
			t.Errorf("a job of the batch carries key %q", j.GetIdempotencyKey())
		}
	}

	for _, tc := range []struct {
		code  connect.Code
		fail  int
		calls int
	}{
		{connect.CodeUnavailable, -1, enqueueTries},
		{connect.CodeInvalidArgument, 1, 1},
		{connect.CodeFailedPrecondition, 1, 1},
	} {
		f.enqueueFail, f.enqueueCode, f.enqueueCalls = tc.fail, tc.code, 0
		if r := byoc(t, "action", "run", "shop-acme", "--", "echo", "hi"); r.code == 0 {
			t.Errorf("%v: exit 0, want a failure", tc.code)
		}
		if f.enqueueCalls != tc.calls {
			t.Errorf("%v: %d calls, want %d", tc.code, f.enqueueCalls, tc.calls)
		}
	}
}

// keyRE is what imsd accepts as an idempotency key.
var keyRE = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,255}$`)
