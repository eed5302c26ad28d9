package e2e

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// streamEnd receives a server stream in the background and reports the
// error it ended with.
func streamEnd[T any](st *connect.ServerStreamForClient[T]) <-chan error {
	end := make(chan error, 1)
	go func() {
		for st.Receive() {
		}
		end <- st.Err()
	}()
	return end
}

// waitStreamEnd waits for a stream to end with code.
func waitStreamEnd(t *testing.T, what string, end <-chan error, code connect.Code) {
	t.Helper()
	select {
	case err := <-end:
		if connect.CodeOf(err) != code {
			t.Errorf("%s ended with %v, want %v", what, err, code)
		}
	case <-time.After(15 * time.Second):
		t.Errorf("%s still open 15s after its caller lost access", what)
	}
}

// A stream is allowed by its caller's access as it stands, not as it
// stood when the stream opened: revoking a token ends the fleet view and
// the log follows it opened, and a label change that takes an install
// out of a selector grant ends the follows of that install's jobs.
func TestStreamsEndWhenAccessEnds(t *testing.T) {
	// Leases outlast the test: the raw agent does not renew them.
	ims := cluster.StartIMS(t, cluster.Options{LeaseDuration: 10 * time.Minute})
	admin := ims.Admin()
	ctx := context.Background()
	if _, err := admin.CreateApp(ctx, connect.NewRequest(&imsv1.CreateAppRequest{Name: "shop"})); err != nil {
		t.Fatal(err)
	}
	in, err := admin.CreateInstall(ctx, connect.NewRequest(&imsv1.CreateInstallRequest{App: "shop", Name: "acme", Labels: map[string]string{"customer": "acme"}}))
	if err != nil {
		t.Fatal(err)
	}
	// A job that runs, has written a line, and does not end: its log's
	// follows stay open.
	a := cluster.EnrollRaw(t, ims.URL(), in.Msg.EnrollmentToken.Token)
	a.Connect(t, 1)
	job := enqueue(t, admin, "acme", "true", 0)
	as := a.Assignment(t)
	a.Answer(t, a.Send(t, cluster.Ack(job.Id, as.FencingToken)))
	a.Answer(t, a.Send(t, cluster.Logs1(job.Id, as.FencingToken, 1, "line 1")))

	token := func(name, selector string) imsv1connect.OperatorServiceClient {
		tok, err := admin.CreateApiToken(ctx, connect.NewRequest(&imsv1.CreateApiTokenRequest{Name: name, Role: imsv1.Role_ROLE_VIEWER, Selector: selector}))
		if err != nil {
			t.Fatal(err)
		}
		return ims.Client(tok.Msg.Token)
	}
	viewer, acmeViewer := token("viewer", ""), token("acme-viewer", "customer=acme")
	// Streams still open at the end are cancelled, not drained.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()

	w, err := viewer.WatchInstalls(sctx, connect.NewRequest(&imsv1.WatchInstallsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if !w.Receive() || !w.Msg().Snapshot {
		t.Fatalf("watch: no snapshot: %v", w.Err())
	}
	follow := func(c imsv1connect.OperatorServiceClient) <-chan error {
		st, err := c.StreamJobLogs(sctx, connect.NewRequest(&imsv1.StreamJobLogsRequest{JobId: job.Id, Follow: true}))
		if err != nil {
			t.Fatal(err)
		}
		if !st.Receive() || len(st.Msg().Lines) != 1 {
			t.Fatalf("follow: no first line: %v", st.Err())
		}
		return streamEnd(st)
	}
	watchEnd, viewerLogs, acmeLogs := streamEnd(w), follow(viewer), follow(acmeViewer)

	if _, err := admin.RevokeApiToken(ctx, connect.NewRequest(&imsv1.RevokeApiTokenRequest{IdOrName: "viewer"})); err != nil {
		t.Fatal(err)
	}
	waitStreamEnd(t, "the revoked token's fleet view", watchEnd, connect.CodeUnauthenticated)
	waitStreamEnd(t, "the revoked token's log follow", viewerLogs, connect.CodeUnauthenticated)

	select {
	case err := <-acmeLogs:
		t.Fatalf("acme-viewer's follow ended though its access did not: %v", err)
	default:
	}
	if _, err := admin.LabelInstall(ctx, connect.NewRequest(&imsv1.LabelInstallRequest{Install: "acme", Set: map[string]string{"customer": "initech"}, Overwrite: true})); err != nil {
		t.Fatal(err)
	}
	waitStreamEnd(t, "a follow of an install relabelled out of the caller's selector", acmeLogs, connect.CodePermissionDenied)
}
