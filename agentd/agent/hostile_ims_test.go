package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/pluginhost"
)

// A compromised imsd signs whatever it likes, a job's id included. The
// id names the job's workspace (removed before and after the run), its
// log's local copy and its saved plan's directory, so an id that is a
// path ("../../victim") would have the agent remove and create
// directories outside its own and hand them to the vendor's plugin; one
// with an escape sequence would reach the customer's terminal through
// agentd egress list. The agent refuses such an assignment before it
// acks it (so never runs it), whatever signs it, and acks the next good
// one.
func TestAgentRefusesAJobIDThatIsNotAnID(t *testing.T) {
	for _, id := range []string{"../../victim", "job/../../x", "..", "job_\x1b]52;c;cm0gLXJmIC8=\a", strings.Repeat("j", 129), ""} {
		t.Run(strings.NewReplacer("/", "_", "\x1b", "ESC", "\a", "BEL").Replace(id[:min(len(id), 20)]), func(t *testing.T) {
			rr := &runRecorder{release: make(chan struct{})}
			defer close(rr.release)
			f := &fakeIMS{}
			startFake(t, f, rr)
			fs := <-f.streams
			fs.down <- f.assign(id, 7, "ins_1")
			fs.down <- f.assign("job_ok", 8, "ins_1")
			first := fs.next(t)
			if id != "" {
				if r := first.GetResult(); r == nil || r.JobId != id || !strings.Contains(r.Error, "is not an id") {
					t.Fatalf("the first write is %v, want the refusal of %q", first, id)
				}
				first = fs.next(t)
			}
			if ack := first.GetAck(); ack == nil || ack.JobId != "job_ok" {
				t.Fatalf("the next write is %v, want the ack of job_ok", first)
			}
		})
	}
}

// The plugin runner refuses such an id too, on its own, before the id
// names a directory: the victim beside its work root is untouched.
func TestPluginRunnerRefusesAJobIDThatIsAPath(t *testing.T) {
	root := t.TempDir()
	victim := filepath.Join(root, "victim-1")
	if err := os.MkdirAll(victim, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(victim, "keep"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A loader that knows no type: without the check, the job would fail
	// at its plugin's start, after its workspace was cleared and made.
	r := &PluginRunner{Loader: &pluginhost.Loader{}, WorkRoot: filepath.Join(root, "jobs"), StateRoot: filepath.Join(root, "components"),
		LogRoot: filepath.Join(root, "logs")}
	t.Cleanup(func() { r.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := r.Run(ctx, Job{ID: "../victim", Attempt: 1, ComponentType: "action", Operation: "apply", Timeout: time.Minute}, func(int32, string) {})
	if _, err := os.Stat(filepath.Join(victim, "keep")); err != nil {
		t.Errorf("the directory beside the work root: %v", err)
	}
	if !strings.Contains(out.Error, "is not an id") {
		t.Fatalf("outcome %+v, want the id refused", out)
	}
}

// imsd decides how large a message it sends; the agent reads at most
// Config.MaxReceiveBytes of one (MaxReceiveBytes by default): a larger
// one ends the stream unread, so its job is never acked, and the agent
// connects again.
func TestAgentReadsNoMessageOverItsBound(t *testing.T) {
	rr := &runRecorder{release: make(chan struct{})}
	defer close(rr.release)
	f := &fakeIMS{}
	startFakeWith(t, f, rr, t.TempDir(), nil, func(c *Config) { c.MaxReceiveBytes = 64 << 10 })
	fs := <-f.streams
	big := f.assign("job_big", 7, "ins_1")
	big.GetAssignment().Config = mustStruct(map[string]any{"steps": []any{map[string]any{"run": "echo " + strings.Repeat("x", 200<<10)}}})
	f.sign(big.GetAssignment(), f.key, time.Now().Add(time.Minute))
	fs.down <- big
	deadline := time.After(10 * time.Second)
	for ended := false; !ended; {
		select {
		case m := <-fs.up:
			if m.GetAck() != nil {
				t.Fatalf("the agent acked a message over its bound: %v", m.GetAck())
			}
		case <-fs.done:
			ended = true
		case <-deadline:
			t.Fatal("the stream did not end")
		}
	}
	select {
	case fs2 := <-f.streams:
		fs2.down <- f.assign("job_ok", 8, "ins_1")
		if ack := fs2.next(t).GetAck(); ack == nil || ack.JobId != "job_ok" {
			t.Fatalf("after reconnecting, want the ack of job_ok, got %v", ack)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not connect again")
	}
	if started, _ := rr.get(); len(started) > 0 && started[0] == "job_big" {
		t.Fatalf("ran %q", started)
	}
}
