package e2e

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// One port serves Connect, gRPC and gRPC-Web.
func TestOnePortThreeProtocols(t *testing.T) {
	ims := cluster.StartIMS(t, fast)
	for name, opt := range map[string]connect.ClientOption{
		"connect":  connect.WithProtoJSON(),
		"grpc":     connect.WithGRPC(),
		"grpc-web": connect.WithGRPCWeb(),
	} {
		t.Run(name, func(t *testing.T) {
			c := imsv1connect.NewOperatorServiceClient(agent.DefaultHTTPClient(), ims.URL(), opt, connect.WithInterceptors(cluster.Bearer(ims.AdminToken)))
			r, err := c.WhoAmI(context.Background(), connect.NewRequest(&imsv1.WhoAmIRequest{}))
			if err != nil {
				t.Fatalf("WhoAmI over %s: %v", name, err)
			}
			if r.Msg.Role != imsv1.Role_ROLE_ADMIN || r.Msg.Name != "admin" {
				t.Fatalf("WhoAmI = %v", r.Msg)
			}
		})
	}
}

func TestHealthReadinessMetrics(t *testing.T) {
	ims := cluster.StartIMS(t, fast)
	_, tok := cluster.NewInstall(t, ims.Admin(), "shop", "alpha")
	a := cluster.EnrollRaw(t, ims.URL(), tok)
	a.Connect(t, 1)
	get := func(path string) string {
		t.Helper()
		r, err := http.Get(ims.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		if r.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", path, r.StatusCode, b)
		}
		return string(b)
	}
	if got := get("/healthz"); got != "ok\n" {
		t.Fatalf("/healthz = %q", got)
	}
	if got := get("/readyz"); got != "ready\n" {
		t.Fatalf("/readyz = %q", got)
	}
	if m := get("/metrics"); !strings.Contains(m, "byoc_agents_connected 1") || !strings.Contains(m, "byoc_job_pickup_seconds") {
		t.Fatalf("/metrics lacks byoc metrics:\n%.2000s", m)
	}
}
