package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/agentd/pluginhost"
	"github.com/byoc-dev/byoc/plugins/sdk"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// stateRunner is a runner of the built-in action type with a work root
// and a state root of its own.
func stateRunner(t *testing.T) *agent.PluginRunner {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := &agent.PluginRunner{
		Loader:   &pluginhost.Loader{SelfExe: self, Builtins: []string{"action"}},
		WorkRoot: t.TempDir(), StateRoot: t.TempDir(),
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// logs collects a job's log lines; onLine, if set, sees each.
type logs struct {
	mu     sync.Mutex
	lines  []string
	onLine func(string)
}

func (l *logs) add(_ int32, text string) {
	l.mu.Lock()
	l.lines = append(l.lines, text)
	f := l.onLine
	l.mu.Unlock()
	if f != nil {
		f(text)
	}
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func scriptJob(id, component, script string) agent.Job {
	return agent.Job{ID: id, InstallID: "ins1", Attempt: 1, ComponentType: "action", Component: component,
		Operation: sdk.OpApply, Timeout: time.Minute,
		Config: map[string]any{"steps": []any{map[string]any{"script": script}}}}
}

// A component's state directory outlives its jobs (the work dir does
// not), is the same for every job of the component, and is none of a job
// of no component.
func TestComponentStateDirOutlivesJobs(t *testing.T) {
	r := stateRunner(t)
	script := `n=$(cat "$BYOC_STATE_DIR/n" 2>/dev/null || echo 0); n=$((n+1)); echo $n >"$BYOC_STATE_DIR/n"
echo "run $n in $BYOC_STATE_DIR"; echo "work $PWD"; touch "$PWD/scratch"`
	var works []string
	for i := 1; i <= 2; i++ {
		var l logs
		out := r.Run(t.Context(), scriptJob("job"+string(rune('0'+i)), "db", script), l.add)
		if out.Outcome != agentv1.Outcome_OUTCOME_SUCCEEDED {
			t.Fatalf("run %d: %v %s\n%s", i, out.Outcome, out.Error, &l)
		}
		want := "run " + string(rune('0'+i)) + " in " + filepath.Join(r.StateRoot, "db")
		if !strings.Contains(l.String(), want) {
			t.Fatalf("run %d: log lacks %q:\n%s", i, want, &l)
		}
		for _, line := range l.lines {
			if w, ok := strings.CutPrefix(line, "work "); ok {
				works = append(works, w)
			}
		}
	}
	if len(works) != 2 || works[0] == works[1] {
		t.Fatalf("work dirs %v, want two different ones", works)
	}
	for _, w := range works {
		if _, err := os.Stat(w); !os.IsNotExist(err) {
			t.Errorf("work dir %s outlived its job: %v", w, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(r.StateRoot, "db")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("state dir: %v %v, want mode 0700", fi, err)
	}

	var l logs
	out := r.Run(t.Context(), scriptJob("job3", "", `echo "state=[$BYOC_STATE_DIR]"`), l.add)
	if out.Outcome != agentv1.Outcome_OUTCOME_SUCCEEDED || !strings.Contains(l.String(), "state=[]") {
		t.Errorf("a job of no component: %v %s\n%s", out.Outcome, out.Error, &l)
	}

	out = r.Run(t.Context(), scriptJob("job4", "../etc", "true"), l.add)
	if out.Outcome != agentv1.Outcome_OUTCOME_FAILED || !strings.Contains(out.Error, `component name "../etc" from the assignment cannot name a state directory`) {
		t.Errorf("a component name with a path: %v %q", out.Outcome, out.Error)
	}
}

// Two jobs of one component never hold its state directory at once: the
// second waits, saying so in its log, and runs once the first is done;
// a job of another component does not wait.
func TestComponentStateDirIsLocked(t *testing.T) {
	r := stateRunner(t)
	state := filepath.Join(r.StateRoot, "db")
	first := make(chan agent.Outcome, 1)
	go func() {
		first <- r.Run(t.Context(), scriptJob("job_a", "db",
			`touch "$BYOC_STATE_DIR/a-started"; while [ ! -e "$BYOC_STATE_DIR/release" ]; do sleep 0.02; done; touch "$BYOC_STATE_DIR/a-done"`),
			func(int32, string) {})
	}()
	waitFor(t, func() bool { _, err := os.Stat(filepath.Join(state, "a-started")); return err == nil })

	// Another component runs meanwhile.
	var lo logs
	if out := r.Run(t.Context(), scriptJob("job_o", "web", "true"), lo.add); out.Outcome != agentv1.Outcome_OUTCOME_SUCCEEDED {
		t.Fatalf("a job of another component: %v %s\n%s", out.Outcome, out.Error, &lo)
	}

	// The second job of db waits; once it said so, the first is let go.
	l := logs{onLine: func(text string) {
		if strings.Contains(text, "waiting for component db's state directory") {
			os.WriteFile(filepath.Join(state, "release"), nil, 0o600)
		}
	}}
	out := r.Run(t.Context(), scriptJob("job_b", "db", `test -e "$BYOC_STATE_DIR/a-done" && echo "b after a"`), l.add)
	if out.Outcome != agentv1.Outcome_OUTCOME_SUCCEEDED || !strings.Contains(l.String(), "b after a") {
		t.Fatalf("second job: %v %s\n%s", out.Outcome, out.Error, &l)
	}
	if !strings.Contains(l.String(), "another job of the component holds it (job job_a attempt 1") {
		t.Errorf("the wait line does not name the holder:\n%s", &l)
	}
	if out := <-first; out.Outcome != agentv1.Outcome_OUTCOME_SUCCEEDED {
		t.Fatalf("first job: %v %s", out.Outcome, out.Error)
	}
}

// A job that cannot get its component's state directory before its time
// runs out fails, naming the directory; a lock held by another process
// (another agentd on the same state dir) counts.
func TestComponentStateDirWaitEnds(t *testing.T) {
	r := stateRunner(t)
	if err := os.MkdirAll(r.StateRoot, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(r.StateRoot, ".db.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	f.WriteString("job job_x attempt 3, agent pid 1\n")
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	var l logs
	out := r.Run(ctx, scriptJob("job_b", "db", "touch ran"), l.add)
	// The agent reports a job whose context ended itself (timed out); the
	// runner returns no outcome of its own.
	if out.Outcome != agentv1.Outcome_OUTCOME_UNSPECIFIED {
		t.Errorf("outcome %v %q, want none (the agent reports the timeout)", out.Outcome, out.Error)
	}
	if !strings.Contains(l.String(), "another job of the component holds it (job job_x attempt 3, agent pid 1)") ||
		!strings.Contains(l.String(), "gave up waiting for "+filepath.Join(r.StateRoot, "db")+", held by another job of component db") {
		t.Errorf("log:\n%s", &l)
	}
}

// waitFor polls cond until it holds, failing the test after 20 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
