package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// debugApp declares one debug command, logs, with a component, a
// duration, a bounded int and a free string argument.
var debugApp = map[string]string{
	"app.toml": "name = \"shop\"\n",
	"components/api.toml": `type = "action"
[config]
steps = [{ name = "api", script = "echo api" }]
`,
	"debug/logs.toml": `description = "Shows a component's logs."
script = '''
echo "component=$ARG_COMPONENT since=$ARG_SINCE tail=$ARG_TAIL"
echo "note=$ARG_NOTE"
'''
[[arg]]
name = "component"
type = "component"
required = true
[[arg]]
name = "since"
type = "duration"
default = "10m"
[[arg]]
name = "tail"
type = "int"
min = 1
max = 1000
[[arg]]
name = "note"
`,
	"installs/acme.toml": "",
}

// The typed debug commands: byoc debug runs a declared command
// with a real agent, in the maintenance mode, audited as debug.run with
// its arguments; an undeclared or ill-typed argument is refused naming it,
// by the CLI and by imsd; a hostile value stays data; and with the
// customer's maintenance mode off the agent refuses the job.
func TestDebugCommand(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	cli := cluster.NewCLI(t, ims)
	run := cli.Run
	pushed := cli.PushApp(debugApp)
	stateDir := filepath.Join(t.TempDir(), "agent")
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	cluster.StartAgent(t, ims.URL(), pushed.EnrollToken(t), stateDir)

	if out := run(0, "debug", "acme"); !lineWith(out, "logs", "component: component, required", "since: duration, default 10m", "tail: int 1..1000", "Shows a component's logs.") {
		t.Fatalf("debug list:\n%s", out)
	}
	out := run(0, "debug", "acme", "logs", "api", "--tail", "50", "--reason", "ticket 42")
	if !strings.Contains(out, "component=api since=10m tail=50") {
		t.Fatalf("debug logs:\n%s", out)
	}

	// Refused by the CLI, naming the argument.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"logs", "api", "--follow", "1"}, `argument follow: debug command logs has no argument "follow" (its arguments: component, since, tail, note)`},
		{[]string{"logs", "api", "--since", "$(id)"}, `argument since: "$(id)" is not a duration`},
		{[]string{"logs", "web"}, `argument component: "web" is not a component of the app (its components: api)`},
		{[]string{"logs", "api", "--tail", "0"}, "argument tail: 0 is less than the minimum 1"},
		{[]string{"logs"}, "argument component: is required"},
		{[]string{"psql"}, `no debug command "psql"`},
	} {
		_, errOut, code := cli.Exec(append([]string{"debug", "acme"}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("byoc debug acme %s: exit %d, want 2 and %q:\n%s", strings.Join(c.args, " "), code, c.want, errOut)
		}
	}
	// And by imsd, whatever the client checked.
	admin := ims.Admin()
	ctx := context.Background()
	for _, c := range []struct {
		req  *imsv1.RunDebugCommandRequest
		want string
	}{
		{&imsv1.RunDebugCommandRequest{Install: "acme", Command: "logs", Positional: []string{"api"}, Args: map[string]string{"cmd": "id"}}, `args.cmd: debug command logs has no argument "cmd"`},
		{&imsv1.RunDebugCommandRequest{Install: "acme", Command: "logs", Positional: []string{"api"}, Args: map[string]string{"tail": "1; id"}}, `args.tail: "1; id" is not an integer`},
		{&imsv1.RunDebugCommandRequest{Install: "acme", Command: "logs", Positional: []string{"api", "1h", "2", "x", "y"}}, "positional: debug command logs takes at most 4 positional arguments"},
		{&imsv1.RunDebugCommandRequest{Install: "acme", Command: "log"}, `no debug command named "log" in app revision 1; did you mean "logs"?`},
	} {
		_, err := admin.RunDebugCommand(ctx, connect.NewRequest(c.req))
		wantCode(t, err, connect.CodeInvalidArgument, c.want)
	}

	// A hostile value reaches the script as data: nothing it says runs.
	hostile := `x; echo INJECTED; $(echo INJECTED2) ` + "`echo INJECTED3`"
	out = run(0, "debug", "acme", "logs", "api", "--note", hostile)
	if !strings.Contains(out, "note="+hostile) {
		t.Fatalf("debug with a hostile value:\n%s", out)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "INJECTED") {
			t.Fatalf("a hostile value ran:\n%s", out)
		}
	}

	// Audited as debug.run with the arguments, defaults filled in.
	evs, err := admin.ListAuditEvents(ctx, connect.NewRequest(&imsv1.ListAuditEventsRequest{Install: "acme"}))
	if err != nil {
		t.Fatal(err)
	}
	var runs []*imsv1.AuditEvent
	for _, e := range evs.Msg.Events {
		if e.Kind == "debug.run" {
			runs = append(runs, e)
		}
	}
	if len(runs) != 2 || runs[0].Subject != "logs" || !strings.Contains(runs[0].Data, `"mode":"maintenance"`) ||
		!strings.Contains(runs[0].Data, `{\"component\":\"api\",\"since\":\"10m\",\"tail\":\"50\"}`) ||
		!strings.Contains(runs[0].Data, `"reason":"ticket 42"`) {
		t.Fatalf("debug.run events: %v", runs)
	}

	// The customer turns maintenance off: the agent refuses the job.
	if out := permissions(t, stateDir, "disable", "maintenance"); !lineWith(out, "maintenance", "off") {
		t.Fatalf("agentd permissions disable maintenance:\n%s", out)
	}
	out, errOut, code := cli.Exec("debug", "acme", "logs", "api")
	if code != 1 || !strings.Contains(errOut, "refused: maintenance is turned off in the customer's account") || strings.Contains(out, "component=") {
		t.Fatalf("debug with maintenance off: exit %d\n%s\n%s", code, out, errOut)
	}
}
