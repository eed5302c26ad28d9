package fault

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/imsd/store/pgtest"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// The replica tier: several imsd processes on one PostgreSQL, agents
// spread across them by a layer-4 balancer, and the promises of the
// fault harness (no job twice at once, none lost) kept while replicas
// die or lose their database.

// newReplicaWorld starts n imsd replicas together on a new PostgreSQL
// database, each through its own proxy (to cut it off from PostgreSQL)
// and named imsd-1..n in pg_stat_activity, a balancer in front of them,
// and agents of one install connected through the balancer. The
// operator client goes through the balancer too, as the CLI would.
func newReplicaWorld(t *testing.T, n, agents int, args ...string) *world {
	t.Helper()
	return newReplicaWorldOn(t, pgtest.Start(t), n, agents, args...)
}

// newReplicaWorldOn is newReplicaWorld on the database dsn.
func newReplicaWorldOn(t *testing.T, dsn string, n, agents int, args ...string) *world {
	t.Helper()
	w := &world{t: t, rec: startRecorder(t), install: "acme", start: time.Now()}
	w.replicas = startReplicas(t, dsn, n, &w.dbPaths, args...)
	w.ims = w.replicas[0]
	var addrs []string
	for _, r := range w.replicas {
		addrs = append(addrs, r.Addr)
	}
	w.lb = cluster.StartBalancer(t, addrs...)
	w.c = imsv1connect.NewOperatorServiceClient(agent.DefaultHTTPClient(), w.lb.URL(), connect.WithInterceptors(cluster.Bearer(w.ims.Token)))
	if agents > 0 {
		w.addAgents(w.lb.Addr(), agents)
	}
	return w
}

// startReplicas starts n replicas on dsn, each through a proxy of its
// own (appended to paths) and with the harness's lease timing, their
// logs in files shown when the test fails.
func startReplicas(t *testing.T, dsn string, n int, paths *[]*proxy, args ...string) []*cluster.IMSProcess {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	var dsns []string
	var logs []*os.File
	for i := range n {
		p := startProxy(t, u.Host)
		*paths = append(*paths, p)
		du := *u
		du.Host = p.ln.Addr().String()
		dsns = append(dsns, cluster.WithApplicationName(t, du.String(), fmt.Sprintf("imsd-%d", i+1)))
		f, err := os.Create(filepath.Join(t.TempDir(), fmt.Sprintf("imsd-%d.log", i+1)))
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, f)
		t.Cleanup(func() {
			if t.Failed() {
				b, _ := os.ReadFile(f.Name())
				t.Logf("imsd-%d output (last 100 lines):\n%s", i+1, tail(string(b), 100))
			}
			f.Close()
		})
	}
	args = append([]string{"--lease", lease.String(), "--heartbeat", heartbeat.String(), "--log-level", "debug"}, args...)
	return cluster.StartReplicas(t, dsns, func(i int) io.Writer { return logs[i] }, args...)
}

// agentsOn reads replica i's byoc_agents_connected.
func (w *world) agentsOn(i int) int {
	r, err := http.Get(w.replicas[i].URL() + "/metrics")
	if err != nil {
		return 0
	}
	defer r.Body.Close()
	sc := bufio.NewScanner(r.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "byoc_agents_connected "); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return int(n)
		}
	}
	return 0
}

// replicaWithAgent waits until a replica holds an agent's stream and
// returns the first such replica.
func (w *world) replicaWithAgent() int {
	w.t.Helper()
	found := -1
	cluster.Eventually(w.t, 10*time.Second, "a replica holding an agent", func() bool {
		for i := range w.replicas {
			if w.agentsOn(i) > 0 {
				found = i
				return true
			}
		}
		return false
	})
	return found
}

// killReplica kills replica i with SIGKILL, and starts it again after
// down (never, when down is 0).
func (w *world) killReplica(i int, down time.Duration) {
	w.logf("kill -9 imsd-%d; down for %s", i+1, down)
	w.replicas[i].Kill()
	if down == 0 {
		return
	}
	time.Sleep(down)
	w.replicas[i].Start()
	w.logf("imsd-%d restarted", i+1)
}

// partition cuts replica i off from PostgreSQL for d: its connections
// are closed and new ones refused, as when the database's address stops
// answering.
func (w *world) partition(i int, d time.Duration) {
	w.logf("imsd-%d cut off from PostgreSQL for %s", i+1, d)
	w.dbPaths[i].set(netDrop)
	time.Sleep(d)
	w.dbPaths[i].set(netPass)
	w.logf("imsd-%d reaches PostgreSQL again", i+1)
}

// Replicas started together on an empty database migrate it once (the
// advisory lock of schema/migrations), and each names itself in
// pg_stat_activity.
func TestReplicasMigrateOnceWhenStartedTogether(t *testing.T) {
	skipShort(t)
	t.Parallel()
	dsn := pgtest.Start(t)
	var paths []*proxy
	startReplicas(t, dsn, 3, &paths)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var rows, versions int
	if err := conn.QueryRow(ctx, `SELECT count(*), count(DISTINCT version_id) FROM goose_db_version WHERE version_id > 0`).Scan(&rows, &versions); err != nil {
		t.Fatal(err)
	}
	t.Logf("3 replicas started together: %d migrations recorded, %d distinct", rows, versions)
	if rows != versions || rows == 0 {
		t.Errorf("goose_db_version has %d rows for %d versions; want each migration applied once", rows, versions)
	}
	var names []string
	r, err := conn.Query(ctx, `SELECT DISTINCT application_name FROM pg_stat_activity WHERE application_name LIKE 'imsd-%' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	names, err = pgx.CollectRows(r, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(names, ",") != "imsd-1,imsd-2,imsd-3" {
		t.Errorf("application names in pg_stat_activity: %v; want imsd-1, imsd-2, imsd-3", names)
	}
}

// A job enqueued through one replica is picked up by an agent connected
// to another, woken by NOTIFY (not by a poll).
func TestReplicasEnqueueOnOneRunOnAnother(t *testing.T) {
	skipShort(t)
	t.Parallel()
	w := newReplicaWorld(t, 2, 1)
	on := w.replicaWithAgent()
	other := w.replicas[1-on]
	w.c = other.Client()
	w.logf("the agent is on imsd-%d; enqueueing through imsd-%d", on+1, 2-on)
	enqueued := time.Now()
	w.enqueue(1)
	w.check()
	var started time.Time
	for _, r := range w.rec.records(t) {
		if r.kind == "start" {
			started = r.at
		}
	}
	t.Logf("enqueue through imsd-%d to the job's start on imsd-%d's agent: %s (plugin launch and sandbox included)", 2-on, on+1, started.Sub(enqueued).Round(time.Millisecond))
	if got := w.jobAgent(w.jobs[0]); got == "" {
		t.Error("the job has no agent")
	}
}

// A replica killed with SIGKILL mid-job: its agent reconnects through
// the balancer to a survivor and re-attaches the running job, which
// finishes once (check: never twice at once, nothing lost).
func TestReplicaKilledMidJobAgentReattaches(t *testing.T) {
	skipShort(t)
	t.Parallel()
	w := newReplicaWorld(t, 3, 1)
	w.enqueue(40)
	w.runningOn(w.jobs[0])
	on := w.replicaWithAgent()
	w.killReplica(on, 0)
	w.check()
	r, err := w.c.GetJob(context.Background(), connect.NewRequest(&imsv1.GetJobRequest{Id: w.jobs[0]}))
	if err != nil {
		t.Fatal(err)
	}
	if r.Msg.Job.Attempt != 1 {
		t.Errorf("the job ended at attempt %d; want 1 (re-attached on a survivor, not run again)", r.Msg.Job.Attempt)
	}
}

// A replica and the agent it served die together (one machine lost):
// the survivors' sweeper requeues the job once its lease and grace have
// passed, and the install's other agent, on another replica, runs it to
// the end; the attempts never overlap.
func TestReplicaAndAgentLostTogetherJobMovesOnce(t *testing.T) {
	skipShort(t)
	t.Parallel()
	w := newReplicaWorld(t, 3, 2)
	w.enqueue(40)
	a := w.runningOn(w.jobs[0])
	first := w.jobAgent(w.jobs[0])
	on := w.replicaWithAgent()
	// The replica killed is one holding an agent; when it is not the
	// running job's, the job's agent still dies with it below.
	w.killReplica(on, 0)
	w.logf("kill -9 %s", a.name)
	a.proc.Kill()
	w.check()
	r, err := w.c.GetJob(context.Background(), connect.NewRequest(&imsv1.GetJobRequest{Id: w.jobs[0]}))
	if err != nil {
		t.Fatal(err)
	}
	if j := r.Msg.Job; j.AgentId == first || j.Attempt < 2 {
		t.Errorf("the job ended on agent %s at attempt %d; want it requeued and completed by the other agent (the first, %s, was killed)", j.AgentId, j.Attempt, first)
	}
}

// cronApp is a diamond of four components (a; b and c; d) and a health
// check that cron runs every minute; each job reports to the recorder.
func cronApp(rec string) map[string]string {
	step := func(name string) string {
		return fmt.Sprintf("type = \"action\"\n%s[config]\nsandbox = { network = true }\nsteps = [{ name = %q, script = '''curl -fsS -m 2 \"%s?job=$BYOC_JOB_ID&attempt=$BYOC_ATTEMPT&kind=%s\" >/dev/null''' }]\n",
			map[string]string{"b": "dependencies = [\"a\"]\n", "c": "dependencies = [\"a\"]\n", "d": "dependencies = [\"b\", \"c\"]\n"}[name], name, rec, name)
	}
	return map[string]string{
		"app.toml":          "name = \"shop\"\n[install_defaults]\nparallelism = 2\n",
		"components/a.toml": step("a"), "components/b.toml": step("b"), "components/c.toml": step("c"), "components/d.toml": step("d"),
		"actions/health.toml": fmt.Sprintf(`description = "Checks."
health_check = true
network = true
[[trigger]]
type = "cron"
schedule = "* * * * *"
[[step]]
name = "probe"
script = '''curl -fsS -m 2 "%s?job=$BYOC_JOB_ID&attempt=$BYOC_ATTEMPT&kind=cron" >/dev/null'''
`, rec),
		"installs/acme.toml": "",
	}
}

// Three replicas each run the workflow engine and the cron scheduler
// (every 200ms): a provision workflow runs each component's job once,
// and a cron tick fires one run, not one per replica.
func TestReplicasRunWorkflowsAndCronTicksOnce(t *testing.T) {
	skipShort(t)
	t.Parallel()
	w := newReplicaWorld(t, 3, 0, "--cron-interval", "200ms")
	cli := cluster.NewCLIWith(t, filepath.Join(t.TempDir(), "byoc.json"), w.lb.URL(), w.ims.Token)
	pushed := cli.PushApp(cronApp(w.rec.url))
	cluster.StartAgent(t, w.lb.URL(), pushed.EnrollToken(t), t.TempDir(), w.agentFlags()...)
	if out := cli.Run(0, "install", "provision", "acme", "--wait"); !strings.Contains(out, "succeeded: 4/4 done") {
		t.Fatalf("provision:\n%s", out)
	}
	count := func(kind string) int {
		n := 0
		for _, r := range w.rec.records(t) {
			if r.kind == kind {
				n++
			}
		}
		return n
	}
	for _, c := range []string{"a", "b", "c", "d"} {
		if n := count(c); n != 1 {
			t.Errorf("component %s ran %d times; want once", c, n)
		}
	}
	// The first tick is at the next minute (up to a minute away); every
	// replica evaluates it five times a second.
	cluster.Eventually(t, 75*time.Second, "the cron tick's run", func() bool { return count("cron") > 0 })
	tick := time.Now()
	cluster.Eventually(t, 10*time.Second, "three seconds past the tick", func() bool { return time.Since(tick) > 3*time.Second && time.Now().Second() < 57 })
	if n := count("cron"); n != 1 {
		t.Errorf("one cron tick ran %d times across 3 replicas; want once", n)
	}
}

// A cancel through one replica reaches an agent connected to another in
// milliseconds (NOTIFY on byoc_cancels), not at the agent's next
// heartbeat: the heartbeat here is 5s, and the job must be cancelled
// (the agent stopped it and said so) well within one.
func TestReplicasCancelReachesAgentOnAnother(t *testing.T) {
	skipShort(t)
	t.Parallel()
	const hb = 5 * time.Second
	w := newReplicaWorld(t, 2, 1, "--heartbeat", hb.String(), "--lease", "20s")
	w.enqueue(300)
	w.runningOn(w.jobs[0])
	on := w.replicaWithAgent()
	c := w.replicas[1-on].Client()
	var took []time.Duration
	for i := range 3 {
		if i > 0 {
			w.enqueue(300)
			w.runningOn(w.jobs[i])
		}
		start := time.Now()
		if _, err := c.CancelJob(context.Background(), connect.NewRequest(&imsv1.CancelJobRequest{Id: w.jobs[i], Reason: "test"})); err != nil {
			t.Fatal(err)
		}
		cluster.WaitJob(t, c, w.jobs[i], 2*hb, imsv1.JobState_JOB_STATE_CANCELLED)
		took = append(took, time.Since(start))
	}
	t.Logf("cancel through imsd-%d to the job cancelled on imsd-%d's agent (heartbeat %s): %v", 2-on, on+1, hb, took)
	for _, d := range took {
		if d > hb/3 {
			t.Errorf("a cancel took %s to reach an agent on another replica; want well under the heartbeat (%s)", d, hb)
		}
	}
}

// An agent connected to one replica is shown connected through every
// other: the others know it from its last-seen time, which its replica
// writes once per lease, and show it connected while that is under a
// lease and three heartbeats old. Only a last-seen older than that (its
// replica's write more than two heartbeats late: on a loaded machine,
// with this harness's one-second heartbeat, CI saw it once in 216 polls)
// may show it offline, and only for a moment.
func TestReplicasShowAnAgentConnectedElsewhere(t *testing.T) {
	skipShort(t)
	t.Parallel()
	w := newReplicaWorld(t, 2, 1)
	on := w.replicaWithAgent()
	c := w.replicas[1-on].Client()
	const window = lease + 3*heartbeat
	late := 0
	polls := 0
	for end := time.Now().Add(3 * lease); time.Now().Before(end); polls++ {
		r, err := c.GetInstall(context.Background(), connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: w.install}))
		if err != nil {
			t.Fatal(err)
		}
		if a := r.Msg.Install.Agent; !a.GetConnected() {
			// Read after imsd's own clock: at least as old as imsd saw it.
			age := time.Since(a.GetLastSeenTime().AsTime())
			if age < window {
				t.Fatalf("imsd-%d showed the agent connected to imsd-%d offline with a last-seen %s old, under a lease and three heartbeats (%s)",
					2-on, on+1, age.Round(time.Millisecond), window)
			}
			late++
			t.Logf("imsd-%d's write of the agent's last-seen is late: %s old", on+1, age.Round(time.Millisecond))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if late > polls/10 {
		t.Errorf("imsd-%d showed the agent connected to imsd-%d offline in %d of %d polls over %s: its last-seen is not kept up", 2-on, on+1, late, polls, 3*lease)
	}
	// The agent stops: imsd-on records the stream's end, and the other
	// replica shows it gone well within the last-seen window it would
	// otherwise wait out (a lease and three heartbeats).
	w.agents[0].proc.Stop()
	stopped := time.Now()
	cluster.Eventually(t, lease+3*heartbeat, "the other replica to show the stopped agent offline", func() bool {
		r, err := c.GetInstall(context.Background(), connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: w.install}))
		return err == nil && !r.Msg.Install.Agent.GetConnected()
	})
	if took := time.Since(stopped); took > lease/2 {
		t.Errorf("imsd-%d showed the stopped agent offline only after %s (lease %s)", 2-on, took.Round(time.Millisecond), lease)
	}
}

// An agent revoked through one replica (a copy of its state dir is
// suspected) loses its stream on the replica holding it within moments,
// not at its next reconnection, which a thief's agent need never make:
// that replica is told (store.NotifyKick), or learns it when it next
// records the agent's last-seen time. The agent, refused at its next
// hello, stops for good.
func TestReplicasRevokeEndsStreamOnAnother(t *testing.T) {
	skipShort(t)
	t.Parallel()
	w := newReplicaWorld(t, 2, 1)
	on := w.replicaWithAgent()
	c := w.replicas[1-on].Client()
	if _, err := c.RevokeAgent(context.Background(), connect.NewRequest(&imsv1.RevokeAgentRequest{Install: w.install, Reason: "copied state dir"})); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	cluster.Eventually(t, lease+2*heartbeat, fmt.Sprintf("imsd-%d to end the revoked agent's stream", on+1), func() bool {
		return w.agentsOn(on) == 0 && w.agentsOn(1-on) == 0
	})
	t.Logf("the revoked agent's stream on imsd-%d ended %s after the revocation through imsd-%d", on+1, time.Since(revoked).Round(time.Millisecond), 2-on)
	cluster.Eventually(t, 10*time.Second, "the agent to stop, refused", func() bool {
		return strings.Contains(w.agents[0].proc.Output(), "imsd refused this agent's identity")
	})
	// It stays gone: no replica serves it again.
	time.Sleep(2 * heartbeat)
	if a, b := w.agentsOn(on), w.agentsOn(1-on); a+b != 0 {
		t.Fatalf("the revoked agent has streams again: %d on imsd-%d, %d on imsd-%d", a, on+1, b, 2-on)
	}
}

// Two agentd processes sharing one identity (a copied state dir), each
// connected to another replica: the replicas tell each other of every
// hello, so one process holds the stream, the other is refused wherever
// it comes back, and the conflict is recorded and shown, as on one
// replica (e2e's TestSharedIdentityIsDetectedAndStopsFlapping). Before,
// each replica saw one process only and both ran the install's jobs.
func TestReplicasSharedIdentityIsDetected(t *testing.T) {
	skipShort(t)
	t.Parallel()
	w := newReplicaWorld(t, 2, 0)
	_, token := cluster.NewInstall(t, w.c, "shop", w.install)
	dirA := filepath.Join(t.TempDir(), "agent")
	a := cluster.StartAgent(t, w.replicas[0].URL(), token, dirA, w.agentFlags()...)
	w.waitAgents()
	dirB := filepath.Join(t.TempDir(), "agent")
	if err := os.MkdirAll(dirB, 0o700); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dirA)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dirA, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dirB, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b := cluster.StartAgent(t, w.replicas[1].URL(), "", dirB, w.agentFlags()...)
	var warning string
	cluster.Eventually(t, 20*time.Second, "the install to report an identity conflict", func() bool {
		r, err := w.c.GetInstall(context.Background(), connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: w.install}))
		if err != nil || r.Msg.Install.Agent == nil {
			return false
		}
		warning = r.Msg.Install.Agent.IdentityConflict
		return warning != ""
	})
	if !strings.Contains(warning, "two agentd processes share this agent's identity") {
		t.Fatalf("warning = %q", warning)
	}
	// From then on one stream at a time, on one replica.
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if n := w.agentsOn(0) + w.agentsOn(1); n > 1 {
			t.Fatalf("%d streams of one identity (imsd-1 %d, imsd-2 %d)\nagent A:\n%s\nagent B:\n%s", n, w.agentsOn(0), w.agentsOn(1), tail(a.Output(), 30), tail(b.Output(), 30))
		}
	}
}
