// Package pgtest starts throwaway PostgreSQL servers for tests from the
// machine's own PostgreSQL binaries (/usr/lib/postgresql/*/bin).
//
// Start gives each caller a fresh database. Tests of a package that call
// pgtest.Main from TestMain share one server, started on first use and
// stopped when the tests end; without Main, every Start call gets its own
// server, stopped by the test's cleanup. Either way no server outlives
// `go test` unless the test binary itself is killed.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"
)

// The server shared by the tests of a binary that uses Main. Test helpers
// are the one place where this package-level state is worth it: one
// initdb per binary instead of one per test.
var (
	mainMu      sync.Mutex
	mainActive  bool
	mainServer  *server
	mainErr     error
	databaseSeq atomic.Int64
)

// Main runs m with one PostgreSQL server shared by every Start call, and
// stops that server before exiting. Then, if the tests passed, it fails the
// run if they left goroutines behind (goleak). Call it from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
func Main(m *testing.M) {
	mainMu.Lock()
	mainActive = true
	mainMu.Unlock()
	code := m.Run()
	mainMu.Lock()
	if mainServer != nil {
		mainServer.stop()
	}
	mainMu.Unlock()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left behind by a passing run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Start returns the URL of a new, empty database on a PostgreSQL server
// running on 127.0.0.1. It skips tb under -short, or when no PostgreSQL
// binaries are installed, except under CI=true: there missing binaries
// fail the test, so that CI cannot pass without ever running PostgreSQL.
func Start(tb testing.TB) (dsn string) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("-short: skipping PostgreSQL")
	}
	bin, err := findBin()
	if err != nil {
		missing(tb, err)
		return ""
	}
	var srv *server
	mainMu.Lock()
	if mainActive {
		if mainServer == nil && mainErr == nil {
			mainServer, mainErr = startServer(bin)
		}
		srv, err = mainServer, mainErr
	} else {
		srv, err = startServer(bin)
		if err == nil {
			tb.Cleanup(srv.stop)
		}
	}
	mainMu.Unlock()
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn, err = srv.createDatabase(ctx)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	return dsn
}

// missing skips tb because PostgreSQL is not installed, or fails it under
// CI=true (what CI systems set), where a skip would let the full tier pass
// without ever touching PostgreSQL.
func missing(tb testing.TB, err error) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatalf("%v (CI=true: the full tier must run PostgreSQL)", err)
		return
	}
	tb.Skip(err.Error())
}

// findBin returns the bin directory of the newest installed PostgreSQL.
func findBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	var ok []string
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
				ok = append(ok, d)
			}
		}
	}
	if len(ok) == 0 {
		return "", errors.New("pgtest: no PostgreSQL binaries in /usr/lib/postgresql/*/bin; install postgresql to run these tests")
	}
	sort.Slice(ok, func(i, j int) bool { return version(ok[i]) > version(ok[j]) })
	return ok[0], nil
}

func version(bin string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(bin)))
	return v
}

type server struct {
	dir    string // temp dir: data/, the unix socket, the log
	data   string
	port   int
	cmd    *exec.Cmd
	exited chan struct{}
	once   sync.Once
}

// Command returns a command that runs the PostgreSQL program path (initdb,
// postgres, pg_basebackup, ...) with args as this process's own child,
// killed when this process dies (Pdeathsig): a test binary killed, or
// panicking on its timeout without running its cleanups, leaves no
// PostgreSQL behind (runuser's child would outlive it). When this process
// is root, the program runs as the postgres user: initdb and postgres
// refuse root. Its files go in a directory from MkdirTemp.
func Command(path string, args ...string) (*exec.Cmd, error) {
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	return cmd, nil
}

// MkdirTemp creates a new directory in /tmp (pattern as os.MkdirTemp's)
// that the programs of Command can write: owned by the postgres user when
// this process is root.
func MkdirTemp(pattern string) (string, error) {
	cred, err := credential()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("/tmp", pattern)
	if err != nil {
		return "", err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return "", err
		}
	}
	return dir, nil
}

// credential returns the postgres user's when this process is root, nil
// (this process's own) otherwise.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs a postgres user: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("the postgres user's uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("the postgres user's gid %q: %w", u.Gid, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

func startServer(bin string) (_ *server, err error) {
	dir, err := MkdirTemp("byoc-pgtest-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	s := &server{dir: dir, data: filepath.Join(dir, "data"), exited: make(chan struct{})}
	initdb, err := Command(filepath.Join(bin, "initdb"), "-D", s.data, "-U", "postgres", "--auth=trust",
		"--no-sync", "-E", "UTF8", "--locale=C")
	if err != nil {
		return nil, err
	}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	if s.port, err = freePort(); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "postgres.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	// A throwaway server: durability off, room for the connection pools
	// of several stores. The postmaster dies with this process (Command);
	// its backends exit when it does.
	s.cmd, err = Command(filepath.Join(bin, "postgres"), "-D", s.data, "-p", strconv.Itoa(s.port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=300")
	if err != nil {
		return nil, err
	}
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	go func() { s.cmd.Wait(); close(s.exited) }()
	if err := s.waitReady(30 * time.Second); err != nil {
		s.stop()
		log, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("%w\n%s", err, log)
	}
	return s, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *server) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, db)
}

// waitReady polls until the server accepts a connection, it exits, or
// the deadline passes.
func (s *server) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, s.url("postgres"))
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres not ready after %s: %w", timeout, err)
		}
		select {
		case <-s.exited:
			return errors.New("postgres exited during start-up")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *server) createDatabase(ctx context.Context) (string, error) {
	conn, err := pgx.Connect(ctx, s.url("postgres"))
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	name := fmt.Sprintf("test_%d_%d", os.Getpid(), databaseSeq.Add(1))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("create database: %w", err)
	}
	return s.url(name), nil
}

// stop shuts the server down (immediate mode: nothing in it matters) and
// removes its files.
func (s *server) stop() {
	s.once.Do(func() {
		// Signal the postmaster, named by its postmaster.pid.
		if pid := s.postmasterPID(); pid > 0 {
			syscall.Kill(pid, syscall.SIGQUIT)
		} else if s.cmd.Process != nil {
			s.cmd.Process.Signal(syscall.SIGQUIT)
		}
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
			if pid := s.postmasterPID(); pid > 0 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			s.cmd.Process.Kill()
			<-s.exited
		}
		os.RemoveAll(s.dir)
	})
}

func (s *server) postmasterPID() int {
	b, err := os.ReadFile(filepath.Join(s.data, "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(first))
	return pid
}
