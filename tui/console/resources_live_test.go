package console

import (
	"context"
	"testing"

	tea "charm.land/bubbletea/v2"
	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// TestResourceListsAgainstRealIMS opens :apps, an app's revisions,
// :workflows, a missing workflow's steps and :breakglass against an
// in-process imsd, running the commands their Init returns: the calls in
// backend.go ask what imsd answers.
func TestResourceListsAgainstRealIMS(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the resource lists against a real imsd (full tier)")
	}
	t.Parallel()
	ims := cluster.StartIMS(t, cluster.Options{})
	cluster.NewInstall(t, ims.Admin(), "shop", "acme")
	client := imsv1connect.NewOperatorServiceClient(agent.DefaultHTTPClient(), ims.URL(), connect.WithInterceptors(cluster.Bearer(ims.AdminToken)))
	m, err := New(context.Background(), Options{Conn: &Conn{Server: ims.URL(), Client: client}, NoWatch: true})
	if err != nil {
		t.Fatal(err)
	}
	m.Update(tea.WindowSizeMsg{Width: 120, Height: 24})
	open := func(v view) string {
		t.Helper()
		m.Update(m.reset(v)())
		return stripANSI(v.View())
	}
	mustContain(t, open(newAppsView(m.env)), "NAME", "shop")
	mustContain(t, open(newRevisionsView(m.env, &imsv1.App{Name: "shop"})), "no revisions yet")
	mustContain(t, open(newWorkflowsView(m.env)), "no workflows yet")
	mustContain(t, open(newStepsView(m.env, &imsv1.Workflow{Id: "wf_missing"})), "not listed:")
	mustContain(t, open(newGrantsView(m.env)), "no break-glass grants")
}
