// Package secrets loads the customer's secrets from the agent's secrets
// file. Secrets belong to the customer: imsd only ever names them, the
// agent resolves them from this customer-owned file, and their values are
// redacted from everything a job sends back.
//
// The file holds NAME=value lines; blank lines and lines starting with #
// are ignored. It must not be readable or writable by group or others.
package secrets

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// Name is what a secret may be called: it becomes an environment variable.
var Name = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Load reads the secrets file at path.
func Load(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("secrets file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("secrets file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("secrets file %s is accessible by group or others (mode %v); chmod 600 it", path, fi.Mode().Perm())
	}
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || !Name.MatchString(k) {
			// The line may be a secret itself: never quote it.
			return nil, fmt.Errorf("secrets file %s: line %d: want NAME=value with NAME of letters, digits and _", path, n)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("secrets file %s: line %d: %s is defined twice", path, n, k)
		}
		out[k] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("secrets file %s: %w", path, err)
	}
	return out, nil
}
