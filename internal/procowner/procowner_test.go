package procowner

import (
	"os/exec"
	"syscall"
	"testing"
)

func TestSelfIsAliveAndParses(t *testing.T) {
	me, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	if !me.Alive() {
		t.Fatal("this process's own tag is not alive")
	}
	if st, ok := ReadStat(me.PID); !ok || st.PGID != syscall.Getpgrp() || st.State == 'Z' {
		t.Fatalf("ReadStat(self) = %+v, %v; want process group %d", st, ok, syscall.Getpgrp())
	}
	got, rest, ok := Parse(me.String() + "-abc-def")
	if !ok || got != me || rest != "abc-def" {
		t.Fatalf("Parse(%q) = %v, %q, %v", me.String()+"-abc-def", got, rest, ok)
	}
	// The same pid with another start time is another process: a reused
	// pid must not keep a dead owner's things alive.
	if (Tag{PID: me.PID, Start: me.Start + 1}).Alive() {
		t.Fatal("a tag with this pid but another start time counts as alive")
	}
	for _, bad := range []string{"", "123", "123-x", "x.1-y", "1.x-y", "0.5-y", "-1.5-y", "12.34"} {
		if _, _, ok := Parse(bad); ok {
			t.Errorf("Parse(%q) accepted it", bad)
		}
	}
}

func TestDeadProcessIsNotAlive(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	start, ok := startTime(cmd.Process.Pid)
	if !ok {
		t.Fatal("no start time for a running child")
	}
	tag := Tag{PID: cmd.Process.Pid, Start: start}
	if !tag.Alive() {
		t.Fatal("a running child is not alive")
	}
	cmd.Process.Kill()
	cmd.Wait()
	if tag.Alive() {
		t.Fatal("a killed and reaped child is still alive")
	}
}
