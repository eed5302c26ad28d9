package secrets_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/agentd/secrets"
)

func write(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secrets.env")
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoad(t *testing.T) {
	got, err := secrets.Load(write(t, "# comment\nDB_PASSWORD=p=ss word\n\nAPI_TOKEN=tok\n", 0o600))
	if err != nil || got["DB_PASSWORD"] != "p=ss word" || got["API_TOKEN"] != "tok" || len(got) != 2 {
		t.Fatalf("Load = %v, %v", got, err)
	}
	for _, tt := range []struct {
		content string
		mode    os.FileMode
		want    string
	}{
		{"A=b\n", 0o644, "accessible by group or others (mode -rw-r--r--)"},
		{"A=b\nthis-is-a-secret-value\n", 0o600, "line 2: want NAME=value"},
		{"A=b\nA=c\n", 0o600, "line 2: A is defined twice"},
		{"9A=b\n", 0o600, "line 1: want NAME=value"},
	} {
		_, err := secrets.Load(write(t, tt.content, tt.mode))
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "this-is-a-secret") {
			t.Errorf("Load(%q) error = %v, want %q", tt.content, err, tt.want)
		}
	}
}
