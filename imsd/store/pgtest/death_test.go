package pgtest_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/byoc-dev/byoc/imsd/store/pgtest"
)

const deathHelperEnv = "BYOC_PGTEST_DEATH_HELPER"

// TestServerDiesWithTheBinaryHelper is the killed test binary of
// TestServerDiesWithTheBinary: it starts a server, prints the pid of
// its connection's backend, and waits to be killed.
func TestServerDiesWithTheBinaryHelper(t *testing.T) {
	if os.Getenv(deathHelperEnv) == "" {
		t.Skip("run by TestServerDiesWithTheBinary")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.Start(t))
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	fmt.Println(pid)
	select {}
}

// TestServerDiesWithTheBinary: a test binary killed outright (as a
// timeout's panic skips every cleanup) leaves no PostgreSQL behind: its
// postmaster and backends die with it.
func TestServerDiesWithTheBinary(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	helper := exec.Command(exe, "-test.run", "^TestServerDiesWithTheBinaryHelper$", "-test.count", "1")
	helper.Env = append(os.Environ(), deathHelperEnv+"=1")
	helper.Stderr = os.Stderr
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		helper.Process.Kill()
		t.Fatalf("the helper printed no pid: %v", err)
	}
	backend, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		helper.Process.Kill()
		t.Fatalf("the helper printed %q", line)
	}
	postmaster := ppid(t, backend)
	t.Cleanup(func() { syscall.Kill(postmaster, syscall.SIGKILL) })
	if err := helper.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	helper.Wait()
	deadline := time.Now().Add(20 * time.Second)
	for alive(postmaster) || alive(backend) {
		if time.Now().After(deadline) {
			t.Fatalf("PostgreSQL (postmaster %d, backend %d) outlived the test binary that started it", postmaster, backend)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stat returns the fields of /proc/PID/stat after the command's name.
func stat(pid int) []string {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(st)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
}

func ppid(t *testing.T, pid int) int {
	f := stat(pid)
	if len(f) < 2 {
		t.Fatalf("no process %d", pid)
	}
	p, _ := strconv.Atoi(f[1])
	return p
}

// alive reports whether pid runs (a zombie, dead but not reaped by a
// PID 1 that does not reap, does not).
func alive(pid int) bool {
	f := stat(pid)
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}
