package sandbox

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Both ways of building a sandbox show the command only what Mounts
// name: a host file beside the writable directory does not exist inside,
// a read-only file cannot be written, and the writable directory can.
func TestMountsHideTheRest(t *testing.T) {
	root := t.TempDir()
	work := filepath.Join(root, "work")
	secretDir := filepath.Join(root, "state")
	for _, d := range []string{work, secretDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(secretDir, "identity.json")
	ro := filepath.Join(root, "kubeconfig")
	for _, f := range []string{secret, ro} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	script := `cat "$1" || echo ABSENT; ls "$2" || echo NOSTATE; echo x > "$2" || echo NOWRITE; echo y > "$3" || echo READONLY; cat "$3"; echo; echo ok > "$4/out"; id -u; ls /proc | grep -c '^[0-9]'`
	m := Mounts{Writable: []string{work}, ReadOnly: []string{ro}, Chdir: work, UnshareUser: true, TmpReadOnly: true}
	argv := []string{"/bin/sh", "-c", script, "sh", secret, secretDir, ro, work}
	cmds := sandboxCommands(t, m, argv)
	for name, cmd := range cmds {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr, cmd.Env = &out, &out, []string{}
			if err := cmd.Run(); err != nil {
				t.Fatalf("%v: %s", err, out.String())
			}
			got := out.String()
			for _, want := range []string{secret + ": No such file or directory", "ABSENT", "NOSTATE", "NOWRITE", "READONLY"} {
				if !strings.Contains(got, want) {
					t.Errorf("output lacks %q:\n%s", want, got)
				}
			}
			if b, err := os.ReadFile(filepath.Join(work, "out")); err != nil || string(b) != "ok\n" {
				t.Errorf("work dir not writable: %q %v\n%s", b, err, got)
			}
			if b, _ := os.ReadFile(ro); string(b) != "x" {
				t.Errorf("read-only file changed: %q", b)
			}
			if uid, _ := InnerIDs(); !strings.Contains(got, "\n"+strconv.Itoa(uid)+"\n") {
				t.Errorf("not running as uid %d:\n%s", uid, got)
			}
			os.Remove(filepath.Join(work, "out"))
		})
	}
}

// Hidden paths inside a directory the sandbox shows are masked: a
// directory shows empty (but for what is bound inside it), a file empty
// and unreadable;
// a writable directory inside a hidden one stays writable.
func TestMountsMaskHidden(t *testing.T) {
	shown := t.TempDir()
	state := filepath.Join(shown, "agentstate")
	comp := filepath.Join(state, "components", "c")
	if err := os.MkdirAll(comp, 0o700); err != nil {
		t.Fatal(err)
	}
	identity := filepath.Join(state, "identity.json")
	secrets := filepath.Join(shown, "secrets.env")
	for _, f := range []string{identity, secrets} {
		if err := os.WriteFile(f, []byte("host-secret"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	m := Mounts{ReadOnly: []string{shown}, Writable: []string{comp}, Hidden: []string{state, secrets, "/nonexistent"}, Chdir: comp,
		UnshareUser: true, TmpReadOnly: true}
	script := `cat "$1" 2>&1; echo "[$(cat "$2" 2>/dev/null)]"; ls "$3"; echo ok > "$4/f"; echo done`
	argv := []string{"/bin/sh", "-c", script, "sh", identity, secrets, state, comp}
	cmds := sandboxCommands(t, m, argv)
	for name, cmd := range cmds {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr, cmd.Env = &out, &out, []string{}
			if err := cmd.Run(); err != nil {
				t.Fatalf("%v: %s", err, out.String())
			}
			want := identity + ": No such file or directory\n[]\ncomponents\ndone\n"
			if !strings.HasSuffix(out.String(), want) || strings.Contains(out.String(), "host-secret") {
				t.Errorf("output:\n%s\nwant it to end with:\n%s", out.String(), want)
			}
			if b, err := os.ReadFile(filepath.Join(comp, "f")); err != nil || string(b) != "ok\n" {
				t.Errorf("the writable dir inside the hidden one: %q, %v", b, err)
			}
			os.Remove(filepath.Join(comp, "f"))
		})
	}
}

// A path named through a symbolic link whose target is absolute (as a
// provider mirror under a symlinked cache folder is) is shown at the
// name it was given, by both builders.
func TestMountsFollowSymlinkedPaths(t *testing.T) {
	root := t.TempDir()
	real := filepath.Join(root, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(real, "provider"), []byte("mirror"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "cache", "mirror")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	m := Mounts{Writable: []string{work}, ReadOnly: []string{link}, Chdir: work, UnshareUser: true, TmpReadOnly: true}
	argv := []string{"/bin/cat", filepath.Join(link, "provider")}
	cmds := sandboxCommands(t, m, argv)
	for name, cmd := range cmds {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr, cmd.Env = &out, &out, []string{}
			if err := cmd.Run(); err != nil || out.String() != "mirror" {
				t.Fatalf("reading through %s: %v: %q", link, err, out.String())
			}
		})
	}
}

// sandboxCommands is argv in the sandbox m describes, built by each
// builder this machine has: the namespace init always, bubblewrap when
// installed.
func sandboxCommands(t *testing.T, m Mounts, argv []string) map[string]*exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ns, err := NamespaceCommand(self, m, argv, 0)
	if err != nil {
		t.Fatal(err)
	}
	cmds := map[string]*exec.Cmd{"namespaces": ns}
	if bwrap, err := exec.LookPath("bwrap"); err == nil {
		cmds["bubblewrap"] = exec.Command(bwrap, append(append(m.BwrapArgs(), "--"), argv...)...)
	} else {
		t.Log("bubblewrap not installed; testing the namespace sandbox only")
	}
	return cmds
}
