package agentapi

import (
	"testing"
	"time"
)

// Beyond MaxHellos at once, a hello is shed with a hint that grows with
// the demand seen and shrinks with the rate served, within its bounds; a
// slot given back admits the next.
func TestAdmissionShedsBeyondTheBoundWithAHint(t *testing.T) {
	a := newAdmission(2)
	now := time.Unix(1000, 0)
	for i := range 2 {
		if ok, _ := a.enter(now); !ok {
			t.Fatalf("hello %d of 2 shed", i+1)
		}
	}
	ok, first := a.enter(now)
	if ok || first != minRetryHint {
		t.Fatalf("third hello: admitted %v, hint %s; want shed with the %s floor (3 wanting, %d/s assumed)", ok, first, minRetryHint, minHelloRate)
	}
	var last time.Duration
	for range 300 {
		_, last = a.enter(now)
	}
	// 301 shed + 2 served now, at the assumed 100/s: about 3 s.
	if want := 3030 * time.Millisecond; last != want {
		t.Fatalf("hint after 301 sheds = %s; want %s", last, want)
	}
	a.leave(now, now, true) // took 0: no duration measured yet
	if ok, _ := a.enter(now); !ok {
		t.Fatal("a freed slot did not admit the next hello")
	}
	// A second later, with 1,000 served in the second before, the same
	// demand is worth less time.
	a.rate, a.served, a.took = 0, 1000, 0
	later := now.Add(time.Second)
	for range 301 {
		_, last = a.enter(later)
	}
	if last != minRetryHint {
		t.Fatalf("hint at 1,000 served/s = %s; want the %s floor", last, minRetryHint)
	}
	for range 100_000 {
		_, last = a.enter(later)
	}
	if last != maxRetryHint {
		t.Fatalf("hint after 100,000 more sheds = %s; want the %s ceiling", last, maxRetryHint)
	}
	if a.shed.Load() != 1+300+301+100_000 {
		t.Fatalf("shed counter %d", a.shed.Load())
	}
}

// A hello's measured duration says how fast the slots can serve: with 2
// slots and 10ms a hello, 200/s, though fewer were served.
func TestAdmissionHintFollowsTheHellosDuration(t *testing.T) {
	a := newAdmission(2)
	now := time.Unix(1000, 0)
	a.enter(now)
	a.leave(now, now.Add(10*time.Millisecond), true)
	a.enter(now)
	a.enter(now)
	var last time.Duration
	for range 400 {
		_, last = a.enter(now)
	}
	// 400 shed + 2 in flight at 200/s.
	if want := 2010 * time.Millisecond; last.Round(time.Millisecond) != want {
		t.Fatalf("hint = %s; want %s", last, want)
	}
}
