package console

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// releaseFixture is a release halted in its second wave: two installs
// failed, one waits for its window, one runs, the third wave untouched.
func releaseFixture() *imsv1.Release {
	ins := []*imsv1.ReleaseInstall{
		{InstallId: "ins_a", InstallName: "acme", Wave: 0, State: "succeeded", FromRevision: 6, ToRevision: 7},
		{InstallId: "ins_b", InstallName: "beta", Wave: 0, State: "succeeded", FromRevision: 6, ToRevision: 7},
		{InstallId: "ins_g", InstallName: "globex", Wave: 1, State: "failed", FromRevision: 6, ToRevision: 7, WorkflowId: "wf_g1",
			Error: "web: exit status 1: migration 0042 failed: disk quota exceeded"},
		{InstallId: "ins_i", InstallName: "initech", Wave: 1, State: "failed", FromRevision: 6, ToRevision: 7, WorkflowId: "wf_i1",
			Error: "web: exit status 1"},
		{InstallId: "ins_u", InstallName: "umbrella", Wave: 1, State: "waiting", FromRevision: 6, ToRevision: 7,
			WindowOpenTime: timestamppb.New(clock.Add(2*time.Hour + 13*time.Minute)), Error: "customer window Sat 02:00-06:00 Europe/Berlin"},
		{InstallId: "ins_h", InstallName: "hooli", Wave: 1, State: "running", FromRevision: 6, ToRevision: 7, WorkflowId: "wf_h1"},
		{InstallId: "ins_p", InstallName: "piedpiper", Wave: 2, State: "pending", FromRevision: 6, ToRevision: 7},
	}
	r := &imsv1.Release{Id: "rel_0123", AppId: "app_shop", AppName: "shop", AppRevision: 7, Kind: "release",
		State: imsv1.ReleaseState_RELEASE_STATE_HALTED, CurrentWave: 1, MaxFailures: 1, MaxFailuresSpec: "5%", RespectWindows: true,
		CreatedBy: "ops", CreateTime: timestamppb.New(clock.Add(-time.Hour)),
		Error:    "2 installs failed, more than the 1 tolerated (--max-failures 5%); first: globex: web: exit status 1",
		Waves:    []*imsv1.ReleaseWave{{Name: "canary", Spec: "2", Size: 2}, {Name: "wave 2", Spec: "50%", Size: 4}, {Name: "wave 3", Spec: "100%", Size: 1}},
		Installs: ins, Counts: map[string]int32{}}
	for _, in := range ins {
		r.Counts[in.State]++
		w := r.Waves[in.Wave]
		if w.Counts == nil {
			w.Counts = map[string]int32{}
		}
		w.Counts[in.State]++
	}
	return r
}

// openRelease opens :releases, then the fixture's release, fed.
func openRelease(m *Model) *releaseView {
	press(m, ":", "releases", "enter")
	tv := m.top().(*tableView[*imsv1.Release])
	m.Update(tableMsg[*imsv1.Release]{gen: tv.gen, rows: []*imsv1.Release{releaseFixture()}})
	press(m, "enter")
	v := m.top().(*releaseView)
	m.Update(releaseMsg{gen: v.gen, r: releaseFixture()})
	return v
}

// The release view shows a bar per wave, the installs that are not done
// with why (the window's time left for a waiting one), a failure's whole
// reason one key away, and asks before pausing, resuming or cancelling.
func TestReleaseView(t *testing.T) {
	m := newTestModel(t, Options{})
	m.Update(teaSize(120, 24))
	feed(m, snapshot())
	v := openRelease(m)
	s := screen(m)
	mustContain(t, s, "canary", "██████████", "2 failed", "window opens in 2h13m", "globex", "web: exit status 1", "hooli")
	if strings.Contains(s, "piedpiper") || strings.Contains(s, "acme ") {
		t.Errorf("the install list shows done or untouched installs:\n%s", s)
	}
	// enter on a failure describes it: the whole reason.
	press(m, "enter")
	mustContain(t, screen(m), "disk quota exceeded")
	press(m, "esc")
	// r asks; n aborts; y resumes.
	press(m, "r")
	if m.confirm == nil || !strings.Contains(m.confirm.title, "resume release rel_0123") {
		t.Fatalf("r did not ask: %+v", m.confirm)
	}
	press(m, "n")
	if m.confirm != nil || v.chGen != 0 {
		t.Fatal("n did not abort")
	}
	press(m, "X")
	if m.confirm == nil || !strings.Contains(m.confirm.title, "cancel release") {
		t.Fatalf("X did not ask: %+v", m.confirm)
	}
	press(m, "y")
	if v.chGen == 0 {
		t.Fatal("y did not cancel")
	}
	m.Update(releaseChangedMsg{gen: v.chGen, verb: "cancel", r: releaseFixture()})
	mustContain(t, screen(m), "release rel_0123 cancelled")
	// Read-only: no key pauses.
	ro := newTestModel(t, Options{ReadOnly: true})
	ro.Update(teaSize(120, 24))
	feed(ro, snapshot())
	openRelease(ro)
	press(ro, "p")
	if ro.confirm != nil {
		t.Error("read-only mode asked to pause a release")
	}
}

func TestProgressBar(t *testing.T) {
	for _, c := range []struct {
		counts map[string]int32
		want   string
	}{
		{map[string]int32{"succeeded": 5, "pending": 5}, "█████░░░░░ 5/10"},
		{map[string]int32{"succeeded": 2, "failed": 1, "pending": 97}, "▒░░░░░░░░░ 2/100"},
		{map[string]int32{}, "░░░░░░░░░░ 0/0"},
		{map[string]int32{"succeeded": 10}, "██████████ 10/10"},
	} {
		if got := progressBar(c.counts, 10); got != c.want {
			t.Errorf("progressBar(%v) = %q, want %q", c.counts, got, c.want)
		}
	}
}
