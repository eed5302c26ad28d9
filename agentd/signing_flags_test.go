package main

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

// TestKeylessFlagsAllOrNone: the build agent refuses to start with one
// or two of the three --keyless-* flags (each combination), naming those
// given and those missing, and an install agent refuses any of them and
// --artifact-signing-key; each exits 2 before anything started: imsd is
// never dialled and the state directory stays empty.
func TestKeylessFlagsAllOrNone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var dialled atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dialled.Add(1)
			c.Close()
		}
	}()
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("eyJ.x.y\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	flags := []struct{ name, value string }{
		{"--keyless-fulcio-url", "http://127.0.0.1:1"}, {"--keyless-tsa-url", "http://127.0.0.1:2/api/v1/timestamp"}, {"--keyless-token-file", token}}
	start := func(t *testing.T, args ...string) (int, string) {
		t.Helper()
		state := t.TempDir()
		code, stderr := runCapturingStderr(t, append([]string{"--ims", "http://" + ln.Addr().String(), "--enroll-token", "enrol", "--state-dir", state}, args...))
		if ents, err := os.ReadDir(state); err != nil || len(ents) > 0 {
			t.Errorf("the state directory holds %v (%v), want nothing", ents, err)
		}
		if n := dialled.Load(); n > 0 {
			t.Errorf("imsd was dialled %d times", n)
		}
		return code, stderr
	}
	// Every proper subset but the empty one: 1..6 as bit masks.
	for mask := 1; mask < 7; mask++ {
		args := []string{"--role", "build"}
		var given, missing []string
		for i, f := range flags {
			if mask&(1<<i) != 0 {
				args = append(args, f.name, f.value)
				given = append(given, f.name)
			} else {
				missing = append(missing, f.name)
			}
		}
		t.Run(strings.Join(given, "+"), func(t *testing.T) {
			code, stderr := start(t, args...)
			want := "agentd: keyless signing needs --keyless-fulcio-url, --keyless-tsa-url and --keyless-token-file together: " +
				strings.Join(given, ", ") + " given, " + strings.Join(missing, ", ") + " missing\n"
			if code != 2 || stderr != want {
				t.Fatalf("exit %d, stderr %q; want exit 2, %q", code, stderr, want)
			}
		})
	}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"install agent, keyless", []string{"--keyless-fulcio-url", "http://127.0.0.1:1", "--keyless-tsa-url", "http://127.0.0.1:2", "--keyless-token-file", token},
			"agentd: --keyless-fulcio-url, --keyless-tsa-url, --keyless-token-file: for the build agent (--role build) only, and this agent's role is install\n"},
		{"install agent, one keyless flag", []string{"--role", "install", "--keyless-token-file", token},
			"agentd: --keyless-token-file: for the build agent (--role build) only, and this agent's role is install\n"},
		{"install agent, signing key", []string{"--artifact-signing-key", token},
			"agentd: --artifact-signing-key: for the build agent (--role build) only, and this agent's role is install\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if code, stderr := start(t, c.args...); code != 2 || stderr != c.want {
				t.Fatalf("exit %d, stderr %q; want exit 2, %q", code, stderr, c.want)
			}
		})
	}
}

// runCapturingStderr runs agentd's main flags (run) with args and returns
// its exit code and what it wrote to stderr. (No test of this package
// runs in parallel: os.Stderr is the process's.)
func runCapturingStderr(t *testing.T, args []string) (int, string) {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	saved := os.Stderr
	os.Stderr = f
	code := run(t.Context(), args)
	os.Stderr = saved
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return code, string(b)
}

// TestSigningFilesHiddenFromPlugins: the build agent's signing key and
// its workload identity's token file are among the paths every plugin's
// sandbox hides (a plugin holding the token could get certificates for
// the build agent's identity).
func TestSigningFilesHiddenFromPlugins(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	got := agentPaths(filepath.Join(dir, "state"), "", "", nil, "signing.key", "token")
	for _, want := range []string{filepath.Join(dir, "state"), filepath.Join(dir, "signing.key"), filepath.Join(dir, "token")} {
		if !slices.Contains(got, want) {
			t.Errorf("hidden paths %v lack %s", got, want)
		}
	}
}
