package sdk_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/byoc-dev/byoc/plugins/sdk"
	pluginv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/plugin/v1"
)

// rawPlugin is a plugin built against another protocol version: it
// answers Describe as told and serves Apply and Destroy, nothing else,
// like a plugin whose SDK predates Drift.
type rawPlugin struct {
	pluginv1.UnimplementedComponentPluginServiceServer
	describe *pluginv1.DescribeResponse
}

func (p *rawPlugin) Describe(context.Context, *pluginv1.DescribeRequest) (*pluginv1.DescribeResponse, error) {
	return p.describe, nil
}

func (p *rawPlugin) Apply(_ *pluginv1.ApplyRequest, s grpc.ServerStreamingServer[pluginv1.ApplyResponse]) error {
	return s.Send(&pluginv1.ApplyResponse{Event: &pluginv1.ApplyResponse_Result{Result: &pluginv1.Result{Outputs: map[string]string{"ok": "1"}}}})
}

func (p *rawPlugin) Destroy(_ *pluginv1.DestroyRequest, s grpc.ServerStreamingServer[pluginv1.DestroyResponse]) error {
	return s.Send(&pluginv1.DestroyResponse{Event: &pluginv1.DestroyResponse_Result{Result: &pluginv1.Result{}}})
}

func startRaw(t *testing.T, impl pluginv1.ComponentPluginServiceServer) *sdk.Client {
	t.Helper()
	lis := bufconn.Listen(1 << 16)
	srv := grpc.NewServer()
	pluginv1.RegisterComponentPluginServiceServer(srv, impl)
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///raw",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); srv.Stop() })
	return sdk.NewClient(conn)
}

func TestNegotiate(t *testing.T) {
	tests := []struct {
		name       string
		describe   *pluginv1.DescribeResponse
		negotiated string
		caps       []string
		wantErr    string
	}{
		{
			name:       "1.0 plugin without protocol or capabilities",
			describe:   &pluginv1.DescribeResponse{Type: "old", ProtocolVersions: []int32{1}},
			negotiated: "1.0", caps: []string{sdk.CapDestroy},
		},
		{
			name: "newer minor with capabilities this host does not know",
			describe: &pluginv1.DescribeResponse{Type: "new", ProtocolVersions: []int32{1},
				Protocol: &pluginv1.ProtocolVersion{Major: 1, Minor: 7}, Capabilities: []string{"destroy", "teleport"}},
			negotiated: sdk.Protocol.String(), caps: []string{"destroy", "teleport"},
		},
		{
			name: "other major",
			describe: &pluginv1.DescribeResponse{Type: "future", ProtocolVersions: []int32{2},
				Protocol: &pluginv1.ProtocolVersion{Major: 2, Minor: 0}},
			wantErr: `plugin "future" speaks byoc plugin protocol 2.0, but this agent speaks ` + sdk.Protocol.String(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := startRaw(t, &rawPlugin{describe: tt.describe})
			d, err := c.Negotiate(t.Context())
			if tt.wantErr != "" {
				var ie *sdk.IncompatibleError
				if !errors.As(err, &ie) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Negotiate error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Negotiated.String() != tt.negotiated || strings.Join(d.Capabilities, ",") != strings.Join(tt.caps, ",") {
				t.Errorf("negotiated %s with %v, want %s with %v", d.Negotiated, d.Capabilities, tt.negotiated, tt.caps)
			}
			// What both sides have keeps working.
			res, err := c.Run(t.Context(), sdk.OpApply, nil, nil)
			if err != nil || res.Outputs["ok"] != "1" {
				t.Errorf("apply = %+v, %v", res, err)
			}
			if _, err := c.Run(t.Context(), sdk.OpDestroy, nil, nil); err != nil {
				t.Errorf("destroy: %v", err)
			}
			// Drift is refused by the host, with a reason, before any call.
			var ue *sdk.UnsupportedError
			if _, err := c.Run(t.Context(), sdk.OpDrift, nil, nil); !errors.As(err, &ue) {
				t.Errorf("drift error = %v, want UnsupportedError", err)
			} else {
				t.Logf("drift refused: %v", err)
			}
		})
	}
}

func TestParseProtocolVersion(t *testing.T) {
	for in, want := range map[string]string{"1.1": "1.1", "2": "2.0", " 1.10 ": "1.10"} {
		v, err := sdk.ParseProtocolVersion(in)
		if err != nil || v.String() != want {
			t.Errorf("ParseProtocolVersion(%q) = %v, %v; want %s", in, v, err, want)
		}
	}
	for _, in := range []string{"", "x", "1.x", "-1.0"} {
		if _, err := sdk.ParseProtocolVersion(in); err == nil {
			t.Errorf("ParseProtocolVersion(%q) accepted", in)
		}
	}
}
