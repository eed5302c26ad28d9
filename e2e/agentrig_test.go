package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/imsd/server"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// agentRig is the set-up the agent release tests (offers, rollouts, the
// crash loop) share: imsd serving v1.5.0 with the fast timings, its CLI,
// a registry to publish agent releases to, imsd's release signing key
// and agentd builds stamped with the versions asked for.
type agentRig struct {
	ims    *cluster.IMS
	cli    *cluster.CLI
	repo   string            // where agent releases are published
	key    string            // imsd's signing key file
	builds map[string]string // version → directory holding agentd and byoc-plugins
}

// startAgentRig starts imsd v1.5.0 and a registry, and builds agentd and
// byoc-plugins once for each of versions.
func startAgentRig(t *testing.T, versions ...string) *agentRig {
	t.Helper()
	skipShort(t)
	ocitest.Need(t)
	o := fast
	o.Version = "v1.5.0"
	ims := cluster.StartIMS(t, o)
	r := &agentRig{
		ims:    ims,
		cli:    cluster.NewCLI(t, ims),
		repo:   ocitest.StartRegistry(t, ocitest.RegistryOptions{}).Host + "/byoc/agent",
		key:    filepath.Join(ims.DataDir, server.SigningKeyFileName),
		builds: map[string]string{},
	}
	for _, v := range versions {
		r.builds[v] = buildAgentVersion(t, v)
	}
	return r
}

// publish signs and publishes agentd and byoc-plugins (files) as agent
// release version with byoc agent publish and returns its reference.
func (r *agentRig) publish(t *testing.T, version, agentd, plugins string) string {
	t.Helper()
	dist := t.TempDir()
	copyFile(t, agentd, filepath.Join(dist, "agentd_"+runtime.GOOS+"_"+runtime.GOARCH))
	copyFile(t, plugins, filepath.Join(dist, "byoc-plugins_"+runtime.GOOS+"_"+runtime.GOARCH))
	var pub struct{ Reference string }
	if err := json.Unmarshal([]byte(r.cli.Run(0, "agent", "publish", dist, "--version", version, "--to", r.repo, "--signing-key", r.key, "-o", "json")), &pub); err != nil {
		t.Fatal(err)
	}
	return pub.Reference
}

// publishBuild publishes the build of version build as agent release
// version (they differ for a release whose binaries lie about it).
func (r *agentRig) publishBuild(t *testing.T, version, build string) string {
	t.Helper()
	return r.publish(t, version, filepath.Join(r.builds[build], "agentd"), filepath.Join(r.builds[build], "byoc-plugins"))
}

// rigAgent is an agent the rig enrolled: its binaries' directory (which
// it updates in place), its state directory and its process.
type rigAgent struct {
	bin, state string
	proc       *cluster.AgentProc
}

// startAgent copies the build of version build into a directory of its
// own, enrolls install name of app, starts agentd from there, waits for
// it to connect and, given policy arguments, sets its update policy with
// agentd update policy.
func (r *agentRig) startAgent(t *testing.T, build, app, name string, policy ...string) rigAgent {
	t.Helper()
	bin := t.TempDir()
	copyFile(t, filepath.Join(r.builds[build], "agentd"), filepath.Join(bin, "agentd"))
	copyFile(t, filepath.Join(r.builds[build], "byoc-plugins"), filepath.Join(bin, "byoc-plugins"))
	_, token := cluster.NewInstall(t, r.ims.Admin(), app, name)
	state := filepath.Join(t.TempDir(), "agent")
	proc := cluster.StartAgentBin(t, filepath.Join(bin, "agentd"), nil, r.ims.URL(), token, state)
	cluster.Eventually(t, 60*time.Second, "agent "+name+" to connect", func() bool { return r.agentOf(name).GetConnected() })
	if len(policy) > 0 {
		cmd := exec.Command(filepath.Join(bin, "agentd"), append([]string{"update", "--state-dir", state, "policy"}, policy...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("agentd update policy: %v\n%s", err, out)
		}
	}
	return rigAgent{bin, state, proc}
}

// agentOf is the agent status imsd shows for install name (nil if it
// cannot be read).
func (r *agentRig) agentOf(name string) *imsv1.AgentStatus {
	g, err := r.ims.Admin().GetInstall(context.Background(), connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: name}))
	if err != nil {
		return nil
	}
	return g.Msg.Install.Agent
}
