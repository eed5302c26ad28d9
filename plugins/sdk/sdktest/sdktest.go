// Package sdktest runs a plugin in-process and drives it the way the agent
// does: over the real gRPC service, through an *sdk.Client, without a
// subprocess. Plugin authors use it in their own tests.
package sdktest

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/byoc-dev/byoc/plugins/sdk"
)

// Start serves p on an in-memory connection and returns a client for it.
// Everything is stopped when the test ends.
func Start(tb testing.TB, p sdk.Plugin) *sdk.Client {
	tb.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	if err := (&sdk.GRPCPlugin{Impl: p}).GRPCServer(nil, srv); err != nil {
		tb.Fatalf("register plugin: %v", err)
	}
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///sdktest",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	)
	if err != nil {
		tb.Fatalf("dial plugin: %v", err)
	}
	tb.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
	})
	return sdk.NewClient(conn)
}

// Run performs op and returns the result and every log line in order. A
// call error fails the test.
func Run(tb testing.TB, c *sdk.Client, op string, req *sdk.RunRequest) (*sdk.Result, []sdk.LogEvent) {
	tb.Helper()
	var logs []sdk.LogEvent
	res, err := c.Run(tb.Context(), op, req, func(e sdk.LogEvent) { logs = append(logs, e) })
	if err != nil {
		tb.Fatalf("%s: %v", op, err)
	}
	return res, logs
}
