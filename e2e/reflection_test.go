package e2e

import (
	"context"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// imsd answers gRPC server reflection (so grpcurl and buf curl need no
// proto files) for the operator API, to any token holder, and to no one
// without a token, over gRPC (the reflection client here) and, when it is
// installed, through grpcurl itself.
func TestServerReflectionIsAuthenticated(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	ctx := context.Background()
	vt, err := ims.Admin().CreateApiToken(ctx, connect.NewRequest(&imsv1.CreateApiTokenRequest{Name: "support", Role: imsv1.Role_ROLE_VIEWER}))
	if err != nil {
		t.Fatal(err)
	}
	viewer := vt.Msg.GetToken()

	list := func(token string) ([]protoreflect.FullName, error) {
		c := grpcreflect.NewClient(agent.DefaultHTTPClient(), ims.URL(), connect.WithGRPC())
		h := http.Header{}
		if token != "" {
			h.Set("Authorization", "Bearer "+token)
		}
		s := c.NewStream(ctx, grpcreflect.WithRequestHeaders(h))
		defer s.Close()
		return s.ListServices()
	}
	for name, tok := range map[string]string{"admin": ims.AdminToken, "viewer": viewer} {
		names, err := list(tok)
		if err != nil || !slices.Contains(names, "byoc.ims.v1.OperatorService") {
			t.Errorf("%s: list services = %v, %v; want byoc.ims.v1.OperatorService", name, names, err)
		}
		if slices.Contains(names, "byoc.agent.v1.AgentService") {
			t.Errorf("%s: reflection describes the agent API too: %v", name, names)
		}
	}
	if _, err := list(""); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("without a token, list services = %v, want unauthenticated", err)
	}

	grpcurl, err := exec.LookPath("grpcurl")
	if err != nil {
		t.Log("grpcurl is not installed (go install github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.3): checked with the reflection client only")
		return
	}
	addr := strings.TrimPrefix(ims.URL(), "http://")
	out, err := exec.Command(grpcurl, "-plaintext", "-H", "authorization: Bearer "+viewer, addr, "list").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "byoc.ims.v1.OperatorService") {
		t.Errorf("grpcurl list: %v\n%s", err, out)
	}
	out, err = exec.Command(grpcurl, "-plaintext", "-H", "authorization: Bearer "+viewer, addr, "byoc.ims.v1.OperatorService/WhoAmI").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ROLE_VIEWER") {
		t.Errorf("grpcurl WhoAmI with no proto files: %v\n%s", err, out)
	}
	out, err = exec.Command(grpcurl, "-plaintext", addr, "list").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Unauthenticated") {
		t.Errorf("grpcurl list without a token: %v\n%s", err, out)
	}
}
