package atomicfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "secret")
	for _, content := range []string{"first", "second, longer than the first"} {
		if err := Write(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("read back %q, %v; want %q", got, err, content)
		}
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("temporary files left behind: %v", entries)
	}
}

func TestWriteIntoMissingParentFails(t *testing.T) {
	file := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(filepath.Join(file, "child"), []byte("x"), 0o600); err == nil {
		t.Fatal("writing below a regular file succeeded")
	}
}

// Write syncs the file before the rename and the directory after it:
// without the directory's sync, a power cut can bring back the old
// content after Write returned (a revoked grant coming back live). A
// power cut cannot be made here, so the test watches the syncs through
// the fsync seam, and checks when each happens: the temporary file's
// while the target still has the old content, the directory's once the
// target has the new. The directories Write creates are synced into
// their parents too.
func TestWriteSyncsTheDirectoryAfterTheRename(t *testing.T) {
	root := t.TempDir()
	path := filepath.Join(root, "a", "b", "grants.json")
	type syncCall struct {
		name   string
		dir    bool
		target string // the target's content at the time
	}
	var calls []syncCall
	real := fsync
	fsync = func(f *os.File) error {
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(path)
		calls = append(calls, syncCall{f.Name(), fi.IsDir(), string(b)})
		return real(f)
	}
	t.Cleanup(func() { fsync = real })

	if err := Write(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	calls = nil
	if err := Write(path, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 || calls[0].dir || calls[0].target != "old" || !calls[1].dir || calls[1].name != filepath.Dir(path) || calls[1].target != "new" {
		t.Errorf("syncs %+v, want the temporary file (before the rename) then %s (after it)", calls, filepath.Dir(path))
	}

	// A first write into new directories syncs each into its parent.
	calls = nil
	path = filepath.Join(root, "c", "d", "f")
	if err := Write(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, c := range calls {
		if c.dir {
			dirs = append(dirs, c.name)
		}
	}
	want := []string{filepath.Join(root, "c"), root, filepath.Join(root, "c", "d")}
	if strings.Join(dirs, " ") != strings.Join(want, " ") {
		t.Errorf("synced directories %v, want %v", dirs, want)
	}
}
