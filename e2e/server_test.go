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
	"github.com/byoc-dev/byoc/internal/syncbuf"
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

// imsd --memory-limit sets Go's soft memory limit, says so at start and
// shows it on /metrics (go_gc_gomemlimit_bytes); auto inside a cgroup
// with a limit is internal/gomemlimit's TestFromARealCgroup.
func TestMemoryLimitFlag(t *testing.T) {
	var out syncbuf.Buffer
	p := cluster.StartIMSProcess(t, &out, "--memory-limit", "3GiB")
	if got := metric(t, p.URL(), "go_gc_gomemlimit_bytes"); got != 3<<30 {
		t.Fatalf("go_gc_gomemlimit_bytes = %v, want %d", got, 3<<30)
	}
	if !strings.Contains(out.String(), `msg="memory limit" limit="3GiB (--memory-limit)"`) {
		t.Fatalf("imsd's log does not say the limit:\n%s", out.String())
	}
}
