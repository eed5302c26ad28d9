package fault

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/imsd/store/pgtest"
)

// A primary and a synchronous streaming-replication standby, PostgreSQL's
// own: a failover test starts them, as a vendor's operations team runs
// them, not through pgtest (whose server is one throwaway instance).
type pgPair struct {
	t                   *testing.T
	bin, dir            string
	primary, standby    string // data dirs
	primPort, stbyPort  int
	primCmd, standbyCmd *exec.Cmd
}

// pgCommand runs PostgreSQL's program name as pgtest runs its own: as the
// test binary's child that dies with it, as the postgres user when we are
// root (initdb and postgres refuse root).
func (p *pgPair) pgCommand(name string, args ...string) *exec.Cmd {
	p.t.Helper()
	cmd, err := pgtest.Command(filepath.Join(p.bin, name), args...)
	if err != nil {
		p.t.Fatal(err)
	}
	return cmd
}

func pgBin(t *testing.T) string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Strings(dirs)
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "pg_basebackup")); err == nil {
			return dirs[i]
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no PostgreSQL binaries in /usr/lib/postgresql/*/bin (CI=true: the failover test must run)")
	}
	t.Skip("no PostgreSQL binaries in /usr/lib/postgresql/*/bin")
	return ""
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startPGPair starts a primary whose every commit waits for the standby
// (synchronous_standby_names = '*'), and the standby, from a base backup.
func startPGPair(t *testing.T) *pgPair {
	t.Helper()
	p := &pgPair{t: t, bin: pgBin(t)}
	dir, err := pgtest.MkdirTemp("byoc-failover-")
	if err != nil {
		t.Fatal(err)
	}
	p.dir = dir
	t.Cleanup(func() { p.stop(); os.RemoveAll(dir) })
	p.primary, p.standby = filepath.Join(dir, "primary"), filepath.Join(dir, "standby")
	p.primPort, p.stbyPort = freePort(t), freePort(t)
	run := func(name string, args ...string) {
		if out, err := p.pgCommand(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
	}
	run("initdb", "-D", p.primary, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C")
	p.primCmd = p.start(p.primary, p.primPort, "primary.log", "-c", "wal_level=replica", "-c", "max_wal_senders=4",
		"-c", "synchronous_standby_names=*", "-c", "synchronous_commit=on")
	p.waitReady(p.primPort)
	run("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(p.primPort), "-U", "postgres", "-D", p.standby, "-R", "-X", "stream")
	p.standbyCmd = p.start(p.standby, p.stbyPort, "standby.log")
	p.waitReady(p.stbyPort)
	cluster.Eventually(t, 30*time.Second, "the standby streaming synchronously", func() bool {
		ctx := context.Background()
		c, err := pgx.Connect(ctx, p.url(p.primPort, "postgres"))
		if err != nil {
			return false
		}
		defer c.Close(ctx)
		var state string
		return c.QueryRow(ctx, "SELECT sync_state FROM pg_stat_replication").Scan(&state) == nil && state == "sync"
	})
	return p
}

func (p *pgPair) start(data string, port int, log string, args ...string) *exec.Cmd {
	p.t.Helper()
	f, err := os.Create(filepath.Join(p.dir, log))
	if err != nil {
		p.t.Fatal(err)
	}
	defer f.Close()
	cmd := p.pgCommand("postgres", append([]string{"-D", data, "-p", strconv.Itoa(port), "-k", p.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200"}, args...)...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	go cmd.Wait()
	return cmd
}

func (p *pgPair) url(port int, db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", port, db)
}

func (p *pgPair) waitReady(port int) {
	p.t.Helper()
	cluster.Eventually(p.t, 30*time.Second, fmt.Sprintf("PostgreSQL on port %d", port), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, p.url(port, "postgres"))
		if err != nil {
			return false
		}
		c.Close(ctx)
		return true
	})
}

// postmaster returns the pid in data's postmaster.pid, or 0 when there
// is none (PostgreSQL removes it when it stops).
func postmaster(data string) int {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(first))
	return pid
}

// crashPrimary stops the primary at once (SIGQUIT: no checkpoint, as a
// crash), and promote makes the standby the primary.
func (p *pgPair) crashPrimary() {
	if pid := postmaster(p.primary); pid > 0 {
		syscall.Kill(pid, syscall.SIGQUIT)
	}
}

func (p *pgPair) promote() {
	p.t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, p.url(p.stbyPort, "postgres"))
	if err != nil {
		p.t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "SELECT pg_promote(true, 30)"); err != nil {
		p.t.Fatalf("promote the standby: %v", err)
	}
}

func (p *pgPair) stop() {
	for _, d := range []string{p.primary, p.standby} {
		if pid := postmaster(d); pid > 0 {
			syscall.Kill(pid, syscall.SIGQUIT)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && (postmaster(p.primary) > 0 || postmaster(p.standby) > 0) {
		time.Sleep(50 * time.Millisecond)
	}
}

// A failover of PostgreSQL's primary under two replicas: every enqueue
// acknowledged before the primary crashed is on the promoted standby
// (synchronous replication), the replicas, pointed at it, carry on, and
// every job finishes once, never twice at once (check).
func TestReplicasSurvivePrimaryFailover(t *testing.T) {
	skipShort(t)
	t.Parallel()
	pg := startPGPair(t)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, pg.url(pg.primPort, "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "CREATE DATABASE byoc"); err != nil {
		t.Fatal(err)
	}
	c.Close(ctx)
	w := newReplicaWorldOn(t, pg.url(pg.primPort, "byoc"), 2, 1)
	for range 6 {
		w.enqueue(10)
	}
	w.runningOn(w.jobs[0])
	w.logf("crash the primary (SIGQUIT)")
	pg.crashPrimary()
	time.Sleep(time.Second)
	pg.promote()
	w.logf("standby promoted; pointing the replicas at it")
	for _, p := range w.dbPaths {
		p.retarget(fmt.Sprintf("127.0.0.1:%d", pg.stbyPort))
	}
	for range 3 {
		w.enqueue(5)
	}
	w.check()
}
