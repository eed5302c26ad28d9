package operatorapi

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/imsd/store"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// An enqueue's operator.call record is appended by the call's own write,
// once, before the job's record; a call that fails before writing has it
// appended afterwards; either way exactly one record per call.
func TestEnqueueCallRecordInTheJobsTransaction(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "imsd.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	t0 := time.Unix(1_700_000_000, 0)
	if err := st.CreateApp(ctx, store.App{ID: "app-1", Name: "shop", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateInstall(ctx, store.Install{ID: "inst-1", AppID: "app-1", Name: "acme", CreatedAt: t0},
		store.EnrollmentToken{Hash: "h", ExpiresAt: t0.Add(time.Hour), CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	a := NewAuditor(st, func() time.Time { return t0 })
	req := connect.NewRequest(&imsv1.EnqueueJobRequest{Install: "acme"})
	kinds := func() []string {
		t.Helper()
		evs, err := st.ListAuditEvents(ctx, store.AuditFilter{Chain: "inst-1", OneChain: true})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, ev := range evs {
			out = append(out, ev.Kind)
		}
		return out
	}
	proc := imsv1connect.OperatorServiceEnqueueJobProcedure

	// The handler stores a job: one record of the call, then the job's.
	_, err = a.recordInWrite(ctx, proc, req, func(ctx context.Context, _ connect.AnyRequest) (connect.AnyResponse, error) {
		return nil, st.EnqueueJob(ctx, store.Job{ID: "job-1", InstallID: "inst-1", ComponentType: "action", Operation: "apply",
			MaxAttempts: 1, Timeout: time.Minute, CreatedAt: t0})
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(); len(got) != 3 || got[1] != "operator.call" || got[2] != "job.queued" {
		t.Fatalf("after an enqueue: %v, want install.created, operator.call, job.queued", got)
	}

	// The handler fails before its write: the record is appended after.
	refused := errors.New("refused")
	_, err = a.recordInWrite(ctx, proc, req, func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) {
		return nil, refused
	})
	if !errors.Is(err, refused) {
		t.Fatalf("the call's error: %v", err)
	}
	if got := kinds(); len(got) != 4 || got[3] != "operator.call" {
		t.Fatalf("after a refused call: %v, want one more operator.call", got)
	}
}
