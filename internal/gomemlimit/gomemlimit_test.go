package gomemlimit

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]Setting{
		"auto": {Auto: true}, "": {Auto: true}, "off": {Off: true},
		"1073741824": {Bytes: 1 << 30}, "2GiB": {Bytes: 2 << 30}, "512MiB": {Bytes: 512 << 20},
		"64KiB": {Bytes: 64 << 10}, "1TiB": {Bytes: 1 << 40}, "100B": {Bytes: 100},
	} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"2GB", "2G", "1.5GiB", "-1", "GiB", "0", "0MiB", "lots", "9999999TiB", " 2GiB"} {
		_, err := Parse(in)
		if err == nil || !strings.HasPrefix(err.Error(), "--memory-limit: ") {
			t.Errorf("Parse(%q): err %v, want one naming --memory-limit", in, err)
		}
	}
}

func TestSize(t *testing.T) {
	for n, want := range map[int64]string{2 << 30: "2GiB", 512 << 20: "512MiB", 100: "100B",
		ninety(2 << 30): "1.8GiB", 1536: "1.5KiB"} {
		if got := Size(n); got != want {
			t.Errorf("Size(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestApply(t *testing.T) {
	env := func(gomemlimit string, cg uint64, cgErr error) Env {
		return Env{
			Getenv: func(k string) string {
				if k == "GOMEMLIMIT" {
					return gomemlimit
				}
				return ""
			},
			Cgroup: func() (uint64, error) { return cg, cgErr },
		}
	}
	const runtimeHas = 7 << 30 // what the runtime holds already (from GOMEMLIMIT, say)
	for _, c := range []struct {
		name    string
		s       Setting
		env     Env
		limit   int64
		source  string
		note    string
		printed string
	}{
		{"auto in a 2GiB cgroup", Setting{Auto: true}, env("", 2<<30, nil), ninety(2 << 30), "cgroup", "", "1.8GiB (90% of the cgroup's 2GiB)"},
		{"auto, GOMEMLIMIT wins", Setting{Auto: true}, env("7GiB", 2<<30, nil), runtimeHas, "GOMEMLIMIT", "", "7GiB (GOMEMLIMIT)"},
		{"auto, no cgroup", Setting{Auto: true}, env("", 0, memlimit.ErrNoCgroup), runtimeHas, "none", "", "none (no cgroup memory limit, no GOMEMLIMIT)"},
		{"auto, cgroup without a limit", Setting{Auto: true}, env("", 0, fmt.Errorf("v1: %w", memlimit.ErrNoLimit)), runtimeHas, "none", "", "none (no cgroup memory limit, no GOMEMLIMIT)"},
		{"auto, cgroup unreadable", Setting{Auto: true}, env("", 0, errors.New("permission denied")), runtimeHas, "none", "reading the cgroup's memory limit: permission denied", "none (no cgroup memory limit, no GOMEMLIMIT)"},
		{"a size", Setting{Bytes: 1 << 30}, env("7GiB", 2<<30, nil), 1 << 30, "flag", "", "1GiB (--memory-limit)"},
		{"a size above the cgroup's", Setting{Bytes: 3 << 30}, env("", 2<<30, nil), 3 << 30, "flag", "--memory-limit 3GiB is above the cgroup's limit of 2GiB: the process can be killed before the collector holds it back", "3GiB (--memory-limit)"},
		{"off", Setting{Off: true}, env("7GiB", 2<<30, nil), math.MaxInt64, "off", "", "none (--memory-limit off)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			held := int64(runtimeHas)
			set := func(n int64) int64 {
				old := held
				if n >= 0 {
					held = n
				}
				return old
			}
			a := Apply(c.s, c.env, set)
			if held != c.limit || a.Limit != c.limit || a.Source != c.source || a.Note != c.note || a.String() != c.printed {
				t.Fatalf("runtime holds %d; Apply = %+v %q\nwant limit %d, source %s, note %q, %q", held, a, a.String(), c.limit, c.source, c.note, c.printed)
			}
		})
	}
}

// TestFromARealCgroup starts this test binary again inside a new memory
// cgroup limited to 256 MiB (cgroup v2 where the machine has it, else
// v1's memory controller) and checks that auto set 90 % of it in the
// runtime. It needs root and a writable cgroup hierarchy; CI has both.
func TestFromARealCgroup(t *testing.T) {
	if os.Getenv("GOMEMLIMIT_TEST_CHILD") == "1" {
		a := ApplySystem(Setting{Auto: true}, func(string) string { return "" })
		fmt.Printf("limit=%d runtime=%d source=%s note=%q\n", a.Limit, debug.SetMemoryLimit(-1), a.Source, a.Note)
		return
	}
	dir := newMemoryCgroup(t, 256<<20)
	cmd := exec.Command("sh", "-c", `echo $$ > "$1/cgroup.procs" && exec "$2" -test.run '^TestFromARealCgroup$' -test.v`, "sh", dir, os.Args[0])
	cmd.Env = append(os.Environ(), "GOMEMLIMIT_TEST_CHILD=1", "GOMEMLIMIT=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	want := ninety(256 << 20)
	if line := fmt.Sprintf("limit=%d runtime=%d source=cgroup note=\"\"", want, want); !strings.Contains(string(out), line) {
		t.Fatalf("child printed:\n%s\nwant a line %s", out, line)
	}
}

// newMemoryCgroup makes a memory cgroup limited to limit bytes, removed at
// cleanup, and returns its directory.
func newMemoryCgroup(t *testing.T, limit int64) string {
	t.Helper()
	skip := func(why string) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s (required under CI=true)", why)
		}
		t.Skip(why)
	}
	if os.Geteuid() != 0 {
		skip("needs root to make a cgroup")
	}
	name := "byoc-gomemlimit-" + strconv.Itoa(os.Getpid())
	try := []struct{ root, file string }{
		{"/sys/fs/cgroup", "memory.max"},         // v2 alone
		{"/sys/fs/cgroup/unified", "memory.max"}, // v2 beside v1 (hybrid), where it has the memory controller
		{"/sys/fs/cgroup/memory", "memory.limit_in_bytes"},
	}
	for _, c := range try {
		if _, err := os.Stat(filepath.Join(c.root, "cgroup.procs")); err != nil {
			continue
		}
		if c.file == "memory.max" {
			ctl, err := os.ReadFile(filepath.Join(c.root, "cgroup.controllers"))
			if err != nil || !strings.Contains(string(ctl), "memory") {
				continue
			}
		}
		dir := filepath.Join(c.root, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			continue
		}
		t.Cleanup(func() { os.Remove(dir) })
		if c.file == "memory.max" {
			// The parent must hand the controller down.
			os.WriteFile(filepath.Join(c.root, "cgroup.subtree_control"), []byte("+memory"), 0)
		}
		if err := os.WriteFile(filepath.Join(dir, c.file), []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
			continue
		}
		return dir
	}
	skip("no writable cgroup hierarchy with the memory controller")
	return ""
}

func ninety(n int64) int64 { return int64(float64(n) * Ratio) }
