package agentapi

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/byoc-dev/byoc/imsd/store"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// A debug job with sensitive arguments gets their values, held in
// memory, put into its step's environment and the agent's redaction list
// as its assignment is made (the stored config keeps "***"); one whose
// values this imsd does not hold fails, saying to run it again.
func TestSensitiveArgumentsJoinTheAssignment(t *testing.T) {
	e := newStreamEnv(t)
	e.svc.cfg.SensitiveEnv = func(id string) (map[string]string, bool) {
		if id == "job_held" {
			return map[string]string{"ARG_PASSWORD": "hunter2"}, true
		}
		return nil, false
	}
	ctx := context.Background()
	cfg := []byte(`{"sensitive_env":["ARG_PASSWORD"],"steps":[{"name":"db","script":"x","env":{"ARG_PASSWORD":"***","ARG_USER":"app"}}]}`)
	for i, id := range []string{"job_lost", "job_held"} {
		j := store.Job{ID: id, Config: cfg, InstallID: "ins_1", ComponentType: "action", Operation: "apply", MaxAttempts: 1, Timeout: time.Minute,
			CreatedAt: e.clk.Now().Add(time.Duration(i) * time.Millisecond), CreatedBy: "t"}
		if err := e.st.EnqueueJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	cs, _ := e.open(t, "inst-a")
	if w := cs.next(t).GetWelcome(); w == nil {
		t.Fatal("want a welcome")
	}
	as := cs.next(t).GetAssignment()
	if as == nil || as.JobId != "job_held" {
		t.Fatalf("want job_held assigned, got %v", as)
	}
	b, _ := proto.Marshal(as)
	var got agentv1.JobAssignment
	if err := proto.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	m := got.Config.AsMap()
	env := m["steps"].([]any)[0].(map[string]any)["env"].(map[string]any)
	if env["ARG_PASSWORD"] != "hunter2" || env["ARG_USER"] != "app" || m["sensitive_env"] != nil {
		t.Errorf("assigned config %v", m)
	}
	if l, _ := m["sensitive"].([]any); len(l) != 1 || l[0] != "hunter2" {
		t.Errorf("sensitive list %v", m["sensitive"])
	}
	if j, _ := e.st.GetJob(ctx, "job_held"); strings.Contains(string(j.Config), "hunter2") {
		t.Errorf("stored config holds the value: %s", j.Config)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		j, err := e.st.GetJob(ctx, "job_lost")
		if err != nil {
			t.Fatal(err)
		}
		if j.State.Terminal() {
			if j.State != store.JobFailed || !strings.Contains(j.Error, "run the debug command again") {
				t.Fatalf("job_lost is %s (%q)", j.State, j.Error)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job_lost still %s", j.State)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
