package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/byoc-dev/byoc/agentd/pluginhost"
	"github.com/byoc-dev/byoc/plugins/bundle"
)

// The companion built for this test binary, once, removed by TestMain.
var (
	companionOnce sync.Once
	companionDir  string
	companionErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if companionDir != "" {
		os.RemoveAll(companionDir)
	}
	os.Exit(code)
}

// buildCompanion builds the real byoc-plugins, once per test binary, into
// a directory of its own (0755 dirs: checked as an install's would be).
func buildCompanion(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds byoc-plugins (OPA, Helm): not in -short")
	}
	companionOnce.Do(func() {
		if companionDir, companionErr = os.MkdirTemp("", "agentd-companion-"); companionErr != nil {
			return
		}
		os.Chmod(companionDir, 0o755)
		out, err := exec.Command("go", "build", "-o", filepath.Join(companionDir, bundle.Binary), "../plugins/bundle/byoc-plugins").CombinedOutput()
		if err != nil {
			companionErr = fmt.Errorf("go build byoc-plugins: %v\n%s", err, out)
		}
	})
	if companionErr != nil {
		t.Fatal(companionErr)
	}
	return filepath.Join(companionDir, bundle.Binary)
}

// installLoader is the loader agentd builds for an install's agent, with
// the companion at path.
func installLoader(t *testing.T, path string) *pluginhost.Loader {
	t.Helper()
	l, err := bundledLoader(path, "install")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	l.SelfExe, l.Builtins = self, roleBuiltins("install")
	return l
}

// TestBundledTypesRunInCompanion starts every bundled type the way the
// agent does: a real byoc-plugins process beside nothing but itself,
// found through --bundled-plugins, run as "byoc-plugins TYPE" from the
// descriptor that was checked, answering the plugin protocol as TYPE.
func TestBundledTypesRunInCompanion(t *testing.T) {
	path := buildCompanion(t)
	l := installLoader(t, path)
	if k := l.KnownTypes(); !slices.Equal(k, []string{"action", "helm", "image", "terraform"}) {
		t.Errorf("KnownTypes = %q", k)
	}
	for _, typ := range bundle.Types() {
		t.Run(typ, func(t *testing.T) {
			inst, err := l.Start(t.Context(), typ, pluginhost.StartOptions{WorkDir: t.TempDir()})
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			defer inst.Kill()
			if d := inst.Description(); d.Type != typ {
				t.Errorf("the companion serves %q, want %q", d.Type, typ)
			}
			cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", inst.PGID()))
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00"); !slices.Equal(got, []string{path, typ}) {
				t.Errorf("argv = %q, want [%s %s]", got, path, typ)
			}
			if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", inst.PGID())); err != nil || exe != path {
				t.Errorf("the plugin process runs %q (%v), want %s", exe, err, path)
			}
			// The type's own validation answers: an empty config lacks
			// what each type requires.
			v, err := inst.Validate(t.Context(), map[string]any{})
			if err != nil || len(v.Diagnostics) == 0 {
				t.Errorf("Validate({}) = %+v, %v; want diagnostics", v, err)
			}
		})
	}
}

// A missing or group-writable companion: the job of a bundled type fails
// with an error that names the path searched and what to do.
func TestBundledCompanionRefused(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "bin", bundle.Binary)
	writable := fakeCompanion(t)
	if err := os.Chmod(writable, 0o775); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, path, want string }{
		{"missing", missing, "start plugin terraform: the terraform type is bundled in byoc-plugins, which was not found at " + missing +
			"; install it next to agentd or set agentd --bundled-plugins PATH ($BYOC_BUNDLED_PLUGINS)"},
		{"group-writable", writable, "start plugin terraform: the terraform type is bundled in byoc-plugins: plugin " + writable +
			" is writable by group or others (mode -rwxrwxr-x); refusing to run it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := installLoader(t, tc.path)
			inst, err := l.Start(t.Context(), "terraform", pluginhost.StartOptions{WorkDir: t.TempDir()})
			if err == nil {
				inst.Kill()
				t.Fatal("Start succeeded")
			}
			if err.Error() != tc.want {
				t.Errorf("error = %q\nwant    %q", err, tc.want)
			}
			// Still a known type: the error is about the install, not the type.
			if !slices.Contains(l.KnownTypes(), "terraform") {
				t.Errorf("KnownTypes = %q", l.KnownTypes())
			}
		})
	}
}

// By default agentd looks for byoc-plugins beside its own executable; the
// build agent runs none of its types.
func TestBundledLoaderDefaults(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	l, err := bundledLoader("", "install")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(filepath.Dir(self), "byoc-plugins"); l.BundledExe != want || !slices.Equal(l.Bundled, bundle.Types()) {
		t.Errorf("install: BundledExe %q, Bundled %q; want %q, %q", l.BundledExe, l.Bundled, want, bundle.Types())
	}
	t.Chdir(t.TempDir())
	l, err = bundledLoader("rel/byoc-plugins", "build")
	if err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(l.BundledExe) || len(l.Bundled) != 0 {
		t.Errorf("build: BundledExe %q, Bundled %q", l.BundledExe, l.Bundled)
	}
	// agentd itself no longer serves them.
	for _, typ := range bundle.Types() {
		if builtins[typ] != nil {
			t.Errorf("%s is both built into agentd and bundled", typ)
		}
	}
}
