package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// stagingHelperEnv makes TestStagingHelperProcess, run in a child
// process, an import that made its staging folder in the directory the
// variable names and then hangs mid-way, until it is killed.
const stagingHelperEnv = "BYOC_TEST_STAGING_HELPER_DIR"

func TestStagingHelperProcess(t *testing.T) {
	dir := os.Getenv(stagingHelperEnv)
	if dir == "" {
		t.Skip("the child process of TestBundleImportRemovesWhatAKilledImportLeft")
	}
	s, err := bundleStaging.New(dir)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	if err := os.MkdirAll(filepath.Join(s.Path, "bundle", "oci"), 0o700); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	os.WriteFile(filepath.Join(s.Path, "bundle", "jobs.sealed"), []byte("sealed"), 0o600)
	fmt.Println(s.Path)
	io.Copy(io.Discard, os.Stdin) // until killed
	os.Exit(0)
}

// startImport starts a child that made a staging folder in dir and hangs,
// and returns it and the folder.
func startImport(t *testing.T, dir string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestStagingHelperProcess$")
	cmd.Env = append(os.Environ(), stagingHelperEnv+"="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	path := strings.TrimSpace(line)
	if err != nil || !strings.HasPrefix(path, filepath.Join(dir, stagingPrefix)) {
		t.Fatalf("the child import printed %q: %v", line, err)
	}
	return cmd, path
}

// An import killed with SIGKILL mid-way leaves its staging folder in the
// state directory's staging folder; the next import removes it and says
// so. The folder of an
// import still running is left alone, and so are a symlink named like a
// staging folder (and what it points to) and folders named otherwise.
func TestBundleImportRemovesWhatAKilledImportLeft(t *testing.T) {
	dir := t.TempDir()
	killed, left := startImport(t, dir)
	_, live := startImport(t, dir)

	// Not ours: a symlink named like a staging folder, pointing at a
	// folder with a file, and a folder named otherwise.
	target := t.TempDir()
	if err := os.WriteFile(filepath.Join(target, "keep"), []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, stagingPrefix+"123456")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, stagingPrefix+"mine")
	if err := os.MkdirAll(filepath.Join(other, "x"), 0o700); err != nil {
		t.Fatal(err)
	}

	// While both imports run, nothing is removed.
	var out bytes.Buffer
	bundleStaging.RemoveStale(dir, func(msg string) { fmt.Fprintln(&out, msg) })
	if strings.Contains(out.String(), "removed") {
		t.Fatalf("a cleanup while the imports run printed:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "left "+link+" alone: not a staging folder") {
		t.Fatalf("the cleanup did not say it left the symlink alone:\n%s", out.String())
	}
	for _, p := range []string{left, live} {
		if _, err := os.Stat(filepath.Join(p, "bundle", "jobs.sealed")); err != nil {
			t.Fatalf("a running import's folder was touched: %v", err)
		}
	}

	if err := killed.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed.Wait()
	if _, err := os.Stat(left); err != nil {
		t.Fatalf("the killed import left nothing to clean: %v", err)
	}

	// The next import: it removes the killed one's folder, and only it.
	out.Reset()
	next, err := stageImport(dir, &out)
	if err != nil {
		t.Fatal(err)
	}
	if want := "removed " + left + ", left by an interrupted import\n"; !strings.Contains(out.String(), want) {
		t.Fatalf("the next import printed:\n%s\nwant %q", out.String(), want)
	}
	if strings.Count(out.String(), "removed") != 1 {
		t.Fatalf("the next import removed more than the killed import's folder:\n%s", out.String())
	}
	if _, err := os.Lstat(left); !os.IsNotExist(err) {
		t.Fatalf("the killed import's folder is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(live, "bundle", "jobs.sealed")); err != nil {
		t.Fatalf("the running import's folder was touched: %v", err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode().Type() != os.ModeSymlink {
		t.Fatalf("the symlink was removed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(target, "keep")); err != nil {
		t.Fatalf("the symlink was followed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(other, "x")); err != nil {
		t.Fatalf("a folder named otherwise was removed: %v", err)
	}
	if next.Path == left || next.Path == live {
		t.Fatalf("the next import took the folder %s", next.Path)
	}
	// Its own folder goes when it ends.
	if err := next.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(next.Path); !os.IsNotExist(err) {
		t.Fatalf("the import's own folder is still there: %v", err)
	}
}
