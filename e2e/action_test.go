package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/e2e/cluster"
)

// actionApp has one component, db, that reports an output, a manual
// action reading an input and db's output, and a health check run every
// minute by cron.
var actionApp = map[string]string{
	"app.toml":    "name = \"shop\"\n",
	"inputs.toml": "[[input]]\nname = \"greeting\"\ndefault = \"hello\"\n",
	"components/db.toml": `type = "action"
[config]
steps = [{ name = "db", script = "echo url=pg-$BYOC_INSTALL_ID >> $BYOC_OUTPUTS" }]
`,
	"actions/migrate.toml": `description = "Migrates the database."
mode = "maintenance"
env = { GREETING = "{{ .inputs.greeting }}", DB = "{{ .components.db.outputs.url }}" }
[[step]]
name = "migrate"
script = "echo migrating $DB; echo greeting=$GREETING >> $BYOC_OUTPUTS; echo db=$DB >> $BYOC_OUTPUTS"
`,
	"actions/health.toml": `description = "Checks the database answers."
health_check = true
env = { DB = "{{ .components.db.outputs.url }}" }
[[trigger]]
type = "cron"
schedule = "* * * * *"
[[step]]
name = "probe"
script = "test -n \"$DB\"; echo status=ok >> $BYOC_OUTPUTS"
`,
	"installs/acme.toml": "",
}

type actionRunJSON struct {
	ID      string            `json:"id"`
	Action  string            `json:"action"`
	Trigger string            `json:"trigger"`
	Mode    string            `json:"mode"`
	State   string            `json:"state"`
	Outputs map[string]string `json:"outputs"`
}

// The actions test: a named action run by hand with env from an
// input and a component output, its outputs read back with byoc action
// runs -o json, and a cron health-check action firing on its own and
// setting the install's health.
func TestActionRunsAndCronHealthCheck(t *testing.T) {
	skipShort(t)
	opts := fast
	opts.WorkflowInterval = 200 * time.Millisecond
	// The scheduler's clock runs a minute ahead, so a "* * * * *" tick
	// is due as soon as the install is active, without waiting for one.
	opts.CronInterval = 200 * time.Millisecond
	opts.CronNow = func() time.Time { return time.Now().Add(time.Minute) }
	ims := cluster.StartIMS(t, opts)
	cli := cluster.NewCLI(t, ims)
	run := cli.Run
	pushed := cli.PushApp(actionApp)
	cluster.StartAgent(t, ims.URL(), pushed.EnrollToken(t), t.TempDir())

	out := run(0, "action", "list", "acme")
	if !lineWith(out, "health", "maintenance", "cron * * * * *", "(health check)") || !lineWith(out, "migrate", "maintenance", "manual", "Migrates") {
		t.Fatalf("action list:\n%s", out)
	}
	if out := run(0, "install", "provision", "acme", "--wait"); !strings.Contains(out, "succeeded: 1/1 done") {
		t.Fatalf("provision:\n%s", out)
	}

	out = run(1, "action", "run", "acme", "migrat")
	if !strings.Contains(out, `did you mean "migrate"?`) || !strings.Contains(out, "its actions: health, migrate") {
		t.Fatalf("unknown action:\n%s", out)
	}
	out = run(0, "action", "run", "acme", "migrate", "--wait")
	if !strings.Contains(out, "greeting=hello") || !strings.Contains(out, "db=pg-ins_") {
		t.Fatalf("action run --wait:\n%s", out)
	}

	var runs []actionRunJSON
	if err := json.Unmarshal([]byte(run(0, "action", "runs", "acme", "--action", "migrate", "-o", "json")), &runs); err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].Trigger != "manual" || runs[0].Mode != "maintenance" || runs[0].State != "succeeded" ||
		runs[0].Outputs["greeting"] != "hello" || !strings.HasPrefix(runs[0].Outputs["db"], "pg-ins_") {
		t.Fatalf("migrate runs: %+v", runs)
	}

	// The cron health check fires by itself and makes the install healthy.
	cluster.Eventually(t, 30*time.Second, "the install healthy", func() bool {
		var in struct {
			Health struct {
				State string `json:"state"`
			} `json:"health"`
		}
		out, _, _ := cli.Exec("install", "get", "acme", "-o", "json")
		return json.Unmarshal([]byte(out), &in) == nil && in.Health.State == "healthy"
	})
	out = run(0, "install", "get", "acme")
	if !strings.Contains(out, "healthy, checked") {
		t.Fatalf("install get:\n%s", out)
	}
	if out := run(0, "install", "list"); !lineWith(out, "acme", "active", "healthy") {
		t.Fatalf("install list:\n%s", out)
	}
	runs = nil
	if err := json.Unmarshal([]byte(run(0, "action", "runs", "acme", "--action", "health", "-o", "json")), &runs); err != nil {
		t.Fatal(err)
	}
	// One tick was due: one run, or two when the test crossed a minute
	// boundary (the next tick came due; CI met it at 04:02:59).
	if len(runs) < 1 || len(runs) > 2 {
		t.Fatalf("health runs: %+v", runs)
	}
	for _, r := range runs {
		if r.Trigger != "cron" || r.Outputs["status"] != "ok" {
			t.Fatalf("health runs: %+v", runs)
		}
	}
	out = run(0, "action", "runs", "acme")
	if !lineWith(out, runs[0].ID, "health", "cron", "succeeded", "status=ok") {
		t.Fatalf("action runs:\n%s", out)
	}
}
