package fault

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/agentd/sessionrec"
	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// The replica relaying a support session killed outright (SIGKILL): no
// call is left to audit the session's end; the agent ends the session,
// reconnects through the balancer to the survivor and reports the end,
// which the survivor audits once, with the recording's SHA-256 the
// customer's record holds.
func TestReplicaKilledMidSupportSessionAuditsItsEnd(t *testing.T) {
	skipShort(t)
	t.Parallel()
	w := newReplicaWorld(t, 2, 0)
	cli := cluster.NewCLIWith(t, filepath.Join(t.TempDir(), "byoc.json"), w.lb.URL(), w.ims.Token)
	pushed := cli.PushApp(map[string]string{
		"app.toml":           "name = \"shop\"\n",
		"break_glass.toml":   "max_duration = \"2h\"\n[[role]]\nname = \"debugger\"\ndescription = \"Debug.\"\n",
		"installs/acme.toml": "",
	})
	a := &agentSlot{name: "agent1", stateDir: filepath.Join(t.TempDir(), "agent"), proxy: startProxy(t, w.lb.Addr())}
	a.proc = cluster.StartAgent(t, a.proxy.url(), pushed.EnrollToken(t), a.stateDir, w.agentFlags()...)
	w.agents = append(w.agents, a)
	w.waitAgents()
	agentd := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(cluster.Binaries(t), "agentd"), args...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("agentd %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	agentd("permissions", "--state-dir", a.stateDir, "enable", "break_glass")
	g, err := w.c.RequestBreakGlass(context.Background(), connect.NewRequest(&imsv1.RequestBreakGlassRequest{Install: "acme", Role: "debugger",
		Reason: "INC-13", DurationSeconds: 3600}))
	if err != nil {
		t.Fatal(err)
	}
	cluster.Eventually(t, 20*time.Second, "the agent to hear of the break-glass request", func() bool {
		out, _ := exec.Command(filepath.Join(cluster.Binaries(t), "agentd"), "breakglass", "--state-dir", a.stateDir, "list").CombinedOutput()
		return bytes.Contains(out, []byte(g.Msg.Grant.Id))
	})
	agentd("breakglass", "--state-dir", a.stateDir, "approve", g.Msg.Grant.Id, "--role", "debugger", "--for", "1h", "--allow-sessions")

	on := w.replicaWithAgent()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := w.replicas[on].Client().SupportShell(ctx)
	if err := st.Send(&imsv1.SupportShellRequest{Install: "acme", Open: &imsv1.SupportShellOpen{Command: []string{"/bin/sh", "-c", "echo up-$((40+2)); sleep 600"},
		Size: &imsv1.TerminalSize{Rows: 24, Cols: 80}, Term: "xterm"}}); err != nil {
		t.Fatal(err)
	}
	var id, out string
	for !strings.Contains(out, "up-42") {
		m, err := st.Receive()
		if err != nil {
			t.Fatalf("the session on imsd-%d: %v (output %q)", on+1, err, out)
		}
		if m.Ended != nil {
			t.Fatalf("the session ended: %v", m.Ended)
		}
		id, out = m.SessionId, out+string(m.Output)
	}
	w.killReplica(on, 0)
	dir := sessionrec.Dir(a.stateDir)
	var m sessionrec.Meta
	cluster.Eventually(t, 10*time.Second, "the agent to end the session whose stream broke", func() bool {
		m, err = sessionrec.ReadMeta(dir, id)
		return err == nil && !m.Ended.IsZero()
	})
	survivor := w.replicas[1-on].Client()
	var ends []map[string]string
	cluster.Eventually(t, 20*time.Second, fmt.Sprintf("imsd-%d's audit of the end the agent reported", 2-on), func() bool {
		r, err := survivor.ListAuditEvents(context.Background(), connect.NewRequest(&imsv1.ListAuditEventsRequest{Install: "acme"}))
		if err != nil {
			return false
		}
		ends = ends[:0]
		for _, ev := range r.Msg.Events {
			if ev.Subject == id && ev.Kind == "support.session.ended" {
				var d map[string]string
				if err := json.Unmarshal([]byte(ev.Data), &d); err != nil {
					t.Fatal(err)
				}
				ends = append(ends, d)
			}
		}
		return len(ends) > 0
	})
	if m, err = sessionrec.ReadMeta(dir, id); err != nil {
		t.Fatal(err)
	}
	if len(ends) != 1 || ends[0]["recording_sha256"] != m.SHA256 || ends[0]["reported_late"] == "" {
		t.Fatalf("imsd's support.session.ended records: %v; the customer's record: %+v", ends, m)
	}
}
