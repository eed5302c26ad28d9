// Package supportbundle writes what the vendor's support needs to help
// with an install (`agentd support-bundle -o FILE.tar.gz`): the agent's
// version, its configuration with secrets removed (the stack config, the
// identity without its private key), the newest jobs' local logs, the
// preflight results, the customer's permission state and break-glass
// grants, and the agent's local audit copy. Every file goes through the
// agent's redactor with every secret the agent knows (the customer's
// secrets and sensitive inputs, the enrolment token, the agent's private
// key), in plain, base64, URL-encoded and JSON-escaped forms, before it
// is written; the customer reviews the bundle before sending it.
package supportbundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/agentd/permissions"
	"github.com/byoc-dev/byoc/agentd/preflight"
	"github.com/byoc-dev/byoc/agentd/redact"
	"github.com/byoc-dev/byoc/agentd/secrets"
	"github.com/byoc-dev/byoc/agentd/stack"
)

// Options says what goes into a bundle.
type Options struct {
	// StateDir is the agent's state directory.
	StateDir string
	// Stack is the install stack, when the agent runs from one.
	Stack *stack.Stack
	// SecretsFile is the agent's --secrets-file, if any: its values are
	// redacted (the file itself is never included).
	SecretsFile string
	// EnrollToken is a token given on the command line, redacted too.
	EnrollToken string
	// Preflight is the preflight's results, run for the bundle.
	Preflight []preflight.Result
	// Version is the agent's version line.
	Version string
	// AgentLog is a file of agentd's own log to include (optional).
	AgentLog string
	Now      func() time.Time
}

// maxFile bounds what is read of one file.
const maxFile = 8 << 20

// Write writes the bundle (a gzipped tar) to w and returns the names of
// the files in it.
func Write(ctx context.Context, w io.Writer, o Options) ([]string, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	var values []string
	var problems []string
	if o.SecretsFile != "" {
		m, err := secrets.Load(o.SecretsFile)
		if err != nil {
			problems = append(problems, fmt.Sprintf("secrets file: %v (its values could not be redacted: review the bundle with care)", err))
		}
		for _, v := range m {
			values = append(values, v)
		}
	}
	if o.EnrollToken != "" {
		values = append(values, o.EnrollToken)
	}
	if o.Stack != nil {
		v, err := o.Stack.Values(ctx)
		if err != nil {
			problems = append(problems, fmt.Sprintf("stack values: %v (they could not be redacted: review the bundle with care)", err))
		}
		values = append(values, v.Sensitive...)
		if tok, err := o.Stack.EnrollToken(ctx); err == nil {
			values = append(values, tok)
		}
		// A local stack's secrets file, read whole, like --secrets-file.
		if f := o.Stack.Config.SecretsFile; f != "" {
			if !filepath.IsAbs(f) {
				f = filepath.Join(filepath.Dir(o.Stack.Path), f)
			}
			if m, err := secrets.Load(f); err == nil {
				for _, v := range m {
					values = append(values, v)
				}
			}
		}
	}
	id, idErr := identity.Load(o.StateDir)
	if errors.Is(idErr, identity.ErrNoIMSDKey) {
		idErr = nil // enrolled before jobs were signed: still an identity
	}
	if idErr == nil {
		values = append(values, string(id.PrivateKey), base64.StdEncoding.EncodeToString(id.PrivateKey), base64.StdEncoding.EncodeToString(id.PrivateKey.Seed()))
	}
	values = slices.DeleteFunc(values, func(v string) bool { return len(v) < 4 })
	red := redact.New(values...)

	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	var names []string
	now := o.Now()
	add := func(name string, data []byte) error {
		names = append(names, name)
		return tw.WriteHeader(&tar.Header{Name: "support-bundle/" + name, Mode: 0o600, Size: int64(len(data)), ModTime: now, Typeflag: tar.TypeReg})
	}
	write := func(name string, data []byte) error {
		clean := []byte(red.String(string(data)))
		if err := add(name, clean); err != nil {
			return err
		}
		_, err := tw.Write(clean)
		return err
	}
	readFile := func(path string) ([]byte, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return io.ReadAll(io.LimitReader(f, maxFile))
	}
	copyFile := func(name, path string) error {
		b, err := readFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", path, err))
			return nil
		}
		return write(name, b)
	}

	info := fmt.Sprintf("%s\ncollected %s\nstate dir %s\n", o.Version, now.UTC().Format(time.RFC3339), o.StateDir)
	if err := write("version.txt", []byte(info)); err != nil {
		return nil, err
	}
	// The identity, without its private key.
	if idErr == nil {
		pub := map[string]any{"agent_id": id.AgentID, "install_id": id.InstallID, "ims_url": id.IMSURL, "imsd_keys": len(id.IMSDKeys)}
		b, _ := json.MarshalIndent(pub, "", "  ")
		if err := write("config/identity.json", b); err != nil {
			return nil, err
		}
	} else if !errors.Is(idErr, identity.ErrNotEnrolled) {
		problems = append(problems, "identity: "+idErr.Error())
	}
	if o.Stack != nil {
		if err := copyFile("config/stack.json", o.Stack.Path); err != nil {
			return nil, err
		}
	}
	// The customer's permission state and grants.
	if err := copyFile("permissions/"+permissions.FileName, filepath.Join(o.StateDir, permissions.FileName)); err != nil {
		return nil, err
	}
	if err := copyFile("permissions/"+permissions.GrantsFileName, permissions.GrantsPath(o.StateDir)); err != nil {
		return nil, err
	}
	if o.Preflight != nil {
		var b bytes.Buffer
		preflight.Print(&b, o.Preflight)
		if err := write("preflight.txt", b.Bytes()); err != nil {
			return nil, err
		}
		j, _ := json.MarshalIndent(o.Preflight, "", "  ")
		if err := write("preflight.json", j); err != nil {
			return nil, err
		}
	}
	// The newest jobs' logs and the local audit copy.
	for _, dir := range []string{"logs", "audit"} {
		entries, err := os.ReadDir(filepath.Join(o.StateDir, dir))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			problems = append(problems, fmt.Sprintf("%s: %v", dir, err))
		}
		for _, e := range entries {
			if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), ".") {
				if err := copyFile(dir+"/"+e.Name(), filepath.Join(o.StateDir, dir, e.Name())); err != nil {
					return nil, err
				}
			}
		}
	}
	if o.AgentLog != "" {
		if err := copyFile("agentd.log", o.AgentLog); err != nil {
			return nil, err
		}
	}
	if len(problems) > 0 {
		if err := write("problems.txt", []byte(strings.Join(problems, "\n")+"\n")); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return names, gz.Close()
}
