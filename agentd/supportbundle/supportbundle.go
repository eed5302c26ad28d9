// Package supportbundle writes what the vendor's support needs to help
// with an install (`agentd support-bundle -o FILE.tar.gz`): the agent's
// version, its configuration with secrets removed (the stack config, the
// identity without its private key), the newest jobs' local logs, the
// preflight results, the customer's permission state and break-glass
// grants, the agent's local audit copy, and its egress ledger (what it
// sent imsd: agentd egress list). Every file goes through the
// agent's redactor with every secret the agent knows (the customer's
// secrets and sensitive inputs, the enrolment token, the agent's private
// key), in plain, base64, URL-encoded and JSON-escaped forms, before it
// is written; the customer reviews the bundle before sending it.
//
// MANIFEST.txt lists every file with its size and what was done to it:
// a file longer than 8 MiB keeps its newest 8 MiB, from a line's start,
// behind a marker line, and the manifest gives its original size. The
// audit chain files are never cut. Their records carry no secret by
// design (imsd never holds the customer's secrets, and the agent masks
// them in everything it sends; its own journal holds ids, kinds and
// error texts), so they are copied verbatim and verify (agentd audit
// verify, auditchain.Verify) as the agent's copy does. Should a value the
// agent knows to be secret appear in one all the same, the records
// holding it are masked (they then no longer match their hashes), and
// the manifest says so, names them, and gives the original file's
// SHA-256 and its chain's head, so that the other records can still be
// checked, and the whole against imsd's chain.
package supportbundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
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
	"github.com/byoc-dev/byoc/agentd/ledger"
	"github.com/byoc-dev/byoc/agentd/permissions"
	"github.com/byoc-dev/byoc/agentd/preflight"
	"github.com/byoc-dev/byoc/agentd/secrets"
	"github.com/byoc-dev/byoc/agentd/stack"
	"github.com/byoc-dev/byoc/internal/auditchain"
	"github.com/byoc-dev/byoc/plugins/sdk/redact"
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

// maxFile bounds what is kept of one file; a longer one keeps its last
// maxFile bytes.
const maxFile = 8 << 20

// maxAudit bounds an audit chain file: a chain is never cut (a cut one
// does not verify from its start), so a longer one is left out, and the
// manifest says so with its size and digest.
const maxAudit = 256 << 20

// ManifestName is the bundle's list of its files.
const ManifestName = "MANIFEST.txt"

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
		// The next key of a rotation under way is as secret.
		if r, err := identity.PendingRotation(o.StateDir, id); err == nil && r != nil {
			values = append(values, string(r.PrivateKey), base64.StdEncoding.EncodeToString(r.PrivateKey), base64.StdEncoding.EncodeToString(r.PrivateKey.Seed()))
		}
	}
	values = slices.DeleteFunc(values, func(v string) bool { return len(v) < 4 })
	red := redact.New(values...)

	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	var names []string
	var manifest []string
	now := o.Now()
	add := func(name string, data []byte) error {
		names = append(names, name)
		return tw.WriteHeader(&tar.Header{Name: "support-bundle/" + name, Mode: 0o600, Size: int64(len(data)), ModTime: now, Typeflag: tar.TypeReg})
	}
	// put adds data as is, with a manifest line saying what was done.
	put := func(name string, data []byte, note string) error {
		if err := add(name, data); err != nil {
			return err
		}
		manifest = append(manifest, fmt.Sprintf("%s\t%d bytes\t%s", name, len(data), note))
		_, err := tw.Write(data)
		return err
	}
	writeNote := func(name string, data []byte, note string) error {
		clean := red.String(string(data))
		if clean != string(data) {
			note += "; secrets masked"
		}
		return put(name, []byte(clean), note)
	}
	write := func(name string, data []byte) error { return writeNote(name, data, "") }
	var copyNoted func(name, path, note string) error
	copyFile := func(name, path string) error { return copyNoted(name, path, "") }
	copyNoted = func(name, path, note string) error {
		b, size, err := readTail(path, maxFile)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", path, err))
			return nil
		}
		if int64(len(b)) == size {
			return writeNote(name, b, note)
		}
		cut := size - int64(len(b))
		marker := fmt.Sprintf("[support-bundle: %s had %d bytes, more than the %d kept of a file: its first %d bytes are left out, its last %d follow]\n", path, size, maxFile, cut, len(b))
		if note != "" {
			note += "; "
		}
		return writeNote(name, append([]byte(marker), b...), note+fmt.Sprintf("CUT: the original had %d bytes; the first %d left out (the newest %d kept, behind a marker line)", size, cut, len(b)))
	}
	copyAudit := func(name, path string) error {
		fi, err := os.Stat(path)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", path, err))
			return nil
		}
		if fi.Size() > maxAudit {
			manifest = append(manifest, fmt.Sprintf("%s\tleft out\tLEFT OUT: %d bytes, more than the %d a chain file may have here (a chain is never cut); send it by itself", name, fi.Size(), maxAudit))
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", path, err))
			return nil
		}
		clean, note := auditCopy(b, red)
		return put(name, clean, note)
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
	// The newest jobs' logs, the local audit copy and the egress ledger.
	for _, dir := range []string{"logs", "audit", ledger.DirName} {
		entries, err := os.ReadDir(filepath.Join(o.StateDir, dir))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			problems = append(problems, fmt.Sprintf("%s: %v", dir, err))
		}
		for _, e := range entries {
			if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), ".") {
				name, path := dir+"/"+e.Name(), filepath.Join(o.StateDir, dir, e.Name())
				var err error
				switch dir {
				case "audit":
					err = copyAudit(name, path)
				case ledger.DirName:
					err = copyNoted(name, path, "the egress ledger (what the agent sent imsd, as agentd egress list shows it)")
				default:
					err = copyFile(name, path)
				}
				if err != nil {
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
	m := "# Every file of this bundle: name, size in the bundle, what was done to it.\n" +
		"# Files are as on the agent, with every secret the agent knows masked, unless said otherwise.\n" +
		strings.Join(manifest, "\n") + "\n"
	if err := write(ManifestName, []byte(m)); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return names, gz.Close()
}

// readTail reads the file at path whole when it has at most max bytes;
// else its last max bytes, from the first line start among them (a cut
// mid-line could leave part of a secret the redactor no longer knows). It
// returns the file's size too.
func readTail(path string, max int64) ([]byte, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	size := fi.Size()
	if size <= max {
		b, err := io.ReadAll(io.LimitReader(f, max))
		return b, int64(len(b)), err
	}
	b := make([]byte, max)
	if _, err := f.ReadAt(b, size-max); err != nil && err != io.EOF {
		return nil, 0, err
	}
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	return b, size, nil
}

// auditCopy returns an audit chain file as the bundle holds it, and its
// manifest note: verbatim when no secret the agent knows appears in it;
// else with the records holding one masked, the note naming them and
// giving the original's SHA-256 and chain head, so that the others can
// still be checked.
func auditCopy(b []byte, red *redact.Redactor) ([]byte, string) {
	sum := sha256.Sum256(b)
	head := "no records"
	var records []auditchain.Record
	for line := range bytes.Lines(b) {
		var r auditchain.Record
		if json.Unmarshal(line, &r) == nil {
			records = append(records, r)
		}
	}
	verified := "its chain verifies"
	if len(records) > 0 {
		last := records[len(records)-1]
		head = fmt.Sprintf("%d records, head record %d hash %s", len(records), last.Seq, last.Hash)
		if p := auditchain.Verify(records); p != nil {
			verified = "its chain does NOT verify on the agent either: " + p.Error()
		}
	}
	clean := red.String(string(b))
	if clean == string(b) {
		return b, fmt.Sprintf("VERBATIM (no secret the agent knows appears in it); %s; %s; sha256 %x", head, verified, sum)
	}
	var masked []string
	for line := range strings.Lines(string(b)) {
		if red.String(line) != line {
			var r auditchain.Record
			if json.Unmarshal([]byte(line), &r) == nil {
				masked = append(masked, fmt.Sprint(r.Seq))
			} else {
				masked = append(masked, "(a line that is no record)")
			}
		}
	}
	return []byte(clean), fmt.Sprintf("REDACTED: records %s hold a value the agent knows to be secret and are masked here, so they no longer match their hashes; the original: %s; %s; sha256 %x",
		strings.Join(masked, ", "), head, verified, sum)
}
