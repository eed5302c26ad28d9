package agent

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/permissions"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// assignMode is f.assign with a permission mode, signed with it.
func (f *fakeIMS) assignMode(id string, token int64, mode string) *agentv1.ConnectResponse {
	m := f.assign(id, token, "ins_1")
	as := m.GetAssignment()
	as.Mode = mode
	f.sign(as, f.key, time.Now().Add(time.Minute))
	return m
}

func acceptAck(t *testing.T, fs *fakeStream, job string) {
	t.Helper()
	ack := fs.next(t).GetAck()
	if ack == nil || ack.JobId != job {
		t.Fatalf("want the ack of %s, got %v", job, ack)
	}
	fs.down <- accepted(ack.WriteId)
}

func accepted(id uint64) *agentv1.ConnectResponse {
	return &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Accepted{Accepted: &agentv1.WriteAccepted{WriteId: id}}}
}

// result returns the next result of the agent, accepting the log lines
// before it.
func (fs *fakeStream) result(t *testing.T) *agentv1.JobResult {
	t.Helper()
	for {
		m := fs.next(t)
		if l := m.GetLogs(); l != nil {
			fs.down <- accepted(l.WriteId)
			continue
		}
		if r := m.GetResult(); r != nil {
			return r
		}
		t.Fatalf("want a result, got %v", m)
	}
}

func setPermissions(t *testing.T, a *Agent, change func(*permissions.State)) {
	t.Helper()
	if _, err := permissions.Update(a.cfg.StateDir, time.Now(), "test", change); err != nil {
		t.Fatal(err)
	}
}

// A job whose mode the customer turned off ends REFUSED, saying so, and no
// plugin starts; a job of a mode that is on runs. A break-glass job is
// refused even with break_glass on (no grant). Hello reports the state.
func TestAgentRefusesAJobWhoseModeIsOff(t *testing.T) {
	rr := &runRecorder{release: make(chan struct{})}
	defer close(rr.release)
	f := &fakeIMS{}
	a := startFake(t, f, rr)
	setPermissions(t, a, func(s *permissions.State) { s.Maintenance = false; s.BreakGlass = true })
	fs := <-f.streams

	fs.down <- f.assignMode("job_m", 7, "maintenance")
	acceptAck(t, fs, "job_m")
	r := fs.result(t)
	if r.Outcome != agentv1.Outcome_OUTCOME_REFUSED || r.Error != "refused: maintenance is turned off in the customer's account" || r.FencingToken != 7 {
		t.Fatalf("result %v", r)
	}
	fs.down <- accepted(r.WriteId)

	fs.down <- f.assignMode("job_none", 8, "") // no mode: maintenance
	acceptAck(t, fs, "job_none")
	if r := fs.result(t); r.Outcome != agentv1.Outcome_OUTCOME_REFUSED {
		t.Fatalf("a job naming no mode: %v", r)
	}

	fs.down <- f.assignMode("job_bg", 9, "break_glass")
	acceptAck(t, fs, "job_bg")
	if r := fs.result(t); r.Outcome != agentv1.Outcome_OUTCOME_REFUSED || !strings.Contains(r.Error, "grant") {
		t.Fatalf("a break-glass job without a grant: %v", r)
	}
	if started, _ := rr.get(); len(started) != 0 {
		t.Fatalf("refused jobs started a plugin: %v", started)
	}

	fs.down <- f.assignMode("job_p", 10, "provision")
	acceptAck(t, fs, "job_p")
	eventually(t, "job_p to start", func() bool { s, _ := rr.get(); return len(s) == 1 && s[0] == "job_p" })
}

// The kill switch: disable-all cancels the running job (cancelled, with
// the reason), refuses the next one, and is reported at once in a
// heartbeat while the stream stays up; enable-all lets jobs run again.
func TestAgentDisableAllCancelsAndRefuses(t *testing.T) {
	rr := &runRecorder{release: make(chan struct{})}
	defer close(rr.release)
	f := &fakeIMS{welcome: &agentv1.Welcome{InstallId: "ins_1", HeartbeatIntervalMs: 5000, LeaseDurationMs: 30000}}
	a := startFake(t, f, rr)
	fs := <-f.streams
	fs.down <- f.assignMode("job_a", 7, "maintenance")
	acceptAck(t, fs, "job_a")
	eventually(t, "job_a to start", func() bool { s, _ := rr.get(); return len(s) == 1 })

	setPermissions(t, a, func(s *permissions.State) { s.DisabledAll = true })
	// Within a poll, long before the 5s heartbeat: a heartbeat saying so.
	deadline := time.After(3 * time.Second)
	reported, cancelled := false, false
	for !reported || !cancelled {
		select {
		case m := <-fs.up:
			if hb := m.GetHeartbeat(); hb != nil && hb.Permissions.GetDisabledAll() {
				reported = true
			} else if l := m.GetLogs(); l != nil {
				fs.down <- accepted(l.WriteId)
			} else if m.GetResult() != nil {
				r := m.GetResult()
				if r.Outcome != agentv1.Outcome_OUTCOME_CANCELLED || !strings.Contains(r.Error, "disabled all jobs") {
					t.Fatalf("running job's result %v", r)
				}
				fs.down <- accepted(r.WriteId)
				cancelled = true
			}
		case <-deadline:
			t.Fatalf("kill switch: reported in a heartbeat %v, running job's result %v", reported, cancelled)
		}
	}
	eventually(t, "job_a to be stopped", func() bool { _, s := rr.get(); return len(s) == 1 })

	fs.down <- f.assignMode("job_b", 8, "provision")
	acceptAck(t, fs, "job_b")
	if r := fs.result(t); r.Outcome != agentv1.Outcome_OUTCOME_REFUSED || !strings.Contains(r.Error, "disabled all jobs") {
		t.Fatalf("a job while disabled: %v", r)
	}

	setPermissions(t, a, func(s *permissions.State) { s.DisabledAll = false })
	fs.down <- f.assignMode("job_c", 9, "provision")
	acceptAck(t, fs, "job_c")
	eventually(t, "job_c to start", func() bool { s, _ := rr.get(); return len(s) == 2 && s[1] == "job_c" })
}

// An unreadable permission file refuses every job rather than guess.
func TestAgentRefusesAllWhenThePermissionFileIsBroken(t *testing.T) {
	rr := &runRecorder{release: make(chan struct{})}
	defer close(rr.release)
	f := &fakeIMS{}
	a := startFake(t, f, rr)
	if err := writeFile(permissions.Path(a.cfg.StateDir), "{not json"); err != nil {
		t.Fatal(err)
	}
	fs := <-f.streams
	fs.down <- f.assignMode("job_a", 7, "provision")
	acceptAck(t, fs, "job_a")
	if r := fs.result(t); r.Outcome != agentv1.Outcome_OUTCOME_REFUSED || !strings.Contains(r.Error, "permissions.json") {
		t.Fatalf("result %v", r)
	}
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o600) }
