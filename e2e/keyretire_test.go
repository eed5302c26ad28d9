package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/server"
	"github.com/byoc-dev/byoc/imsd/store"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// imsd key rotate, then key retire, with an agent connected throughout:
// during the overlap the agent runs jobs signed with either key (a
// replica not yet restarted still signs with the old one); retire waits
// for the agent's acknowledgement of the new key; after it, the agent
// refuses a server that offers the old key, for good. Both are audited.
func TestKeyRotateOverlapAndRetire(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	state := filepath.Join(t.TempDir(), "agent")
	_, token := cluster.NewInstall(t, ims.Admin(), "shop", "acme")
	ag := cluster.StartAgent(t, ims.URL(), token, state)
	waitConnected(t, ims, "acme")
	oldID := ims.SigningKey().ID
	addr, dir := ims.Addr(), ims.DataDir
	keyFile := filepath.Join(dir, server.SigningKeyFileName)
	oldKey, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	imsd := func(wantOK bool, args ...string) string {
		t.Helper()
		out, err := exec.Command(filepath.Join(cluster.Binaries(t), "imsd"), args...).CombinedOutput()
		if (err == nil) != wantOK {
			t.Fatalf("imsd %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	runs := func(ims *cluster.IMS, what string) {
		t.Helper()
		waitConnected(t, ims, "acme")
		job := enqueue(t, ims.Admin(), "acme", `echo `+what, 60)
		if _, end := follow(t, ims.Admin(), job.Id); end.State != imsv1.JobState_JOB_STATE_SUCCEEDED {
			t.Fatalf("%s: the job ended %v (%s)", what, end.State, end.Error)
		}
	}
	restart := func(keyBytes []byte, bare bool) *cluster.IMS {
		t.Helper()
		ims.Stop()
		o := fast
		o.DataDir, o.Addr = dir, addr
		if keyBytes != nil {
			// A replica given another key file (and, bare, none of the
			// chain and retirements beside it).
			other := filepath.Join(t.TempDir(), "replica.key")
			if err := os.WriteFile(other, keyBytes, 0o600); err != nil {
				t.Fatal(err)
			}
			if !bare {
				for _, f := range []string{auth.ChainFile(keyFile), auth.RetiredFile(keyFile)} {
					if b, err := os.ReadFile(f); err == nil {
						os.WriteFile(strings.Replace(f, keyFile, other, 1), b, 0o600)
					}
				}
			}
			o.SigningKeyFile = other
		}
		ims = cluster.StartIMS(t, o)
		return ims
	}

	ims.Stop()
	if out := imsd(true, "key", "rotate", "--data-dir", dir); !strings.Contains(out, oldID+" -> ") {
		t.Fatalf("imsd key rotate:\n%s", out)
	}
	ims = restart(nil, false)
	newID := ims.SigningKey().ID
	runs(ims, "signed-with-the-new-key")
	// The overlap: a replica still holding the old key is trusted too.
	ims = restart(oldKey, true)
	if ims.SigningKey().ID != oldID {
		t.Fatal("the replica does not sign with the old key")
	}
	runs(ims, "signed-with-the-old-key-during-the-overlap")
	ims = restart(nil, false)
	runs(ims, "back-on-the-new-key")

	// The agent acknowledged the new key; retire waits for that.
	ims.Stop()
	st, err := store.Open(context.Background(), filepath.Join(dir, "imsd.db"))
	if err != nil {
		t.Fatal(err)
	}
	pending, err := st.AgentsNotAcking(context.Background(), newID)
	st.Close()
	if err != nil || len(pending) != 0 {
		t.Fatalf("agents not acknowledging %s: %+v (%v)", newID, pending, err)
	}
	if out := imsd(true, "key", "retire", "--data-dir", dir); !strings.Contains(out, "retired "+oldID+", signed by "+newID) {
		t.Fatalf("imsd key retire:\n%s", out)
	}
	ims = restart(nil, false)
	runs(ims, "after-the-retirement")
	id, err := identity.Load(state)
	if err != nil || len(id.IMSDKeys) != 1 || len(id.RetiredIMSDKeys) != 1 || id.RetiredIMSDKeys[0] != oldID {
		t.Fatalf("the agent trusts %d keys, retired %v (%v); want only the new one, the old retired", len(id.IMSDKeys), id.RetiredIMSDKeys, err)
	}
	// A server offering the retired key (a stolen old key file, a replica
	// forgotten) is refused: no channel, no job.
	ims = restart(oldKey, true)
	job := enqueue(t, ims.Admin(), "acme", `echo must-not-run`, 60)
	cluster.Eventually(t, 30*time.Second, "the agent to refuse the retired key", func() bool {
		return strings.Contains(ag.Output(), "offered key "+oldID+", which this agent does not trust")
	})
	j, err := ims.Admin().GetJob(context.Background(), connect.NewRequest(&imsv1.GetJobRequest{Id: job.Id}))
	if err != nil || j.Msg.Job.State != imsv1.JobState_JOB_STATE_QUEUED {
		t.Fatalf("the job under the retired key: %v (%v), want still queued", j, err)
	}
	ims = restart(nil, false)
	runs(ims, "the-new-key-again")

	// Both are in the vendor's audit chain.
	out := cluster.NewCLI(t, ims).Run(0, "audit", "list")
	if !strings.Contains(out, "imsd.key_rotated") || !strings.Contains(out, "imsd.key_retired") {
		t.Fatalf("byoc audit list:\n%s", out)
	}
}
