package supportbundle_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/auditlog"
	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/agentd/permissions"
	"github.com/byoc-dev/byoc/agentd/preflight"
	"github.com/byoc-dev/byoc/agentd/stack"
	"github.com/byoc-dev/byoc/agentd/supportbundle"
	"github.com/byoc-dev/byoc/internal/auditchain"
	"github.com/byoc-dev/byoc/internal/stackconfig"
)

// forms are the encodings a secret must not survive in.
func forms(v string) map[string]string {
	j, _ := json.Marshal(v)
	return map[string]string{
		"plain":        v,
		"base64":       base64.StdEncoding.EncodeToString([]byte(v)),
		"url-encoded":  url.QueryEscape(v),
		"json-escaped": strings.Trim(string(j), `"`),
	}
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestBundleLeaksNoSecret plants every secret the agent knows everywhere
// a bundle reads (job logs, the audit copy, the stack config, the
// permission files, the agent's own log, the preflight's details), each in
// plain, base64, URL-encoded and JSON-escaped form, and checks that no
// form of any survives in any file of the bundle.
func TestBundleLeaksNoSecret(t *testing.T) {
	state := t.TempDir()
	stackDir := t.TempDir()
	secret := map[string]string{
		"license_key":      `LK/9f+"quoted"&x=1 lic`,
		"admin_email":      "ops+alerts@acme.example",
		"enroll":           "byoc_enr_S3cr3t+T0ken/x=.kid42",
		"secrets_file_one": "db-p@ss w0rd?&=%",
		"sensitive_value":  `tab\there "and" <angle>`,
	}
	key, err := identity.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := identity.Save(state, identity.Identity{AgentID: "agt_1", InstallID: "ins_1", IMSURL: "http://127.0.0.1:1", PrivateKey: key}); err != nil {
		t.Fatal(err)
	}
	keyForms := []string{base64.StdEncoding.EncodeToString(key), base64.StdEncoding.EncodeToString(key.Seed())}

	// Every place, every form, every secret.
	var planted strings.Builder
	for name, v := range secret {
		for form, enc := range forms(v) {
			planted.WriteString(name + " " + form + ": " + enc + "\n")
		}
	}
	for _, k := range keyForms {
		planted.WriteString("private key: " + k + "\n")
	}
	text := planted.String()
	jtext, _ := json.Marshal(text)
	write(t, filepath.Join(state, "logs", "job_1-1.log"), "system\t"+strings.ReplaceAll(text, "\n", "\nstdout\t"))
	write(t, filepath.Join(state, "audit", "install.jsonl"), `{"chain":"ins_1","seq":1,"kind":"job.log","data":`+string(jtext)+"}\n")
	write(t, filepath.Join(state, "audit", "agent.jsonl"), `{"chain":"agent:agt_1","seq":1,"data":`+string(jtext)+"}\n")
	// The egress ledger, with content the customer turned on.
	write(t, filepath.Join(state, "egress", "ledger.jsonl"), `{"kind":"logs","job":"job_1","size":9,"content":`+string(jtext)+"}\n")
	if _, err := permissions.Update(state, time.Now(), text, func(s *permissions.State) { s.Maintenance = false }); err != nil {
		t.Fatal(err)
	}
	if _, err := permissions.UpdateGrants(state, func(g *permissions.Grants) error {
		g.Grants = append(g.Grants, permissions.Grant{ID: "bg_1", Role: "admin", Reason: text, ExpiresAt: time.Now().Add(time.Hour)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	agentLog := filepath.Join(t.TempDir(), "agentd.log")
	write(t, agentLog, text)
	secretsFile := filepath.Join(t.TempDir(), "secrets")
	write(t, secretsFile, "DB_PASSWORD="+secret["secrets_file_one"]+"\n")

	// A local stack holding the rest: its token file, its secrets file,
	// and (to be sure) a sensitive value right in stack.json.
	sens := secret["sensitive_value"]
	c := stackconfig.Config{Version: 1, Format: "local", Install: "acme", IMS: "http://127.0.0.1:1",
		EnrollToken: stackconfig.Source{File: "enroll.token"}, SecretsFile: "secrets.env",
		Modes:   map[string]stackconfig.Role{"provision": {Enabled: true, Parameter: "EnableProvision"}},
		Inputs:  map[string]stackconfig.Input{"admin_email": {Sensitive: true}, "note": {Sensitive: true, Value: &sens}},
		Secrets: map[string]stackconfig.Source{"license_key": {File: "secrets.env"}}}
	b, _ := json.MarshalIndent(c, "", "  ")
	write(t, filepath.Join(stackDir, "stack.json"), string(b))
	write(t, filepath.Join(stackDir, "secrets.env"), "license_key="+secret["license_key"]+"\nadmin_email="+secret["admin_email"]+"\n")
	write(t, filepath.Join(stackDir, "enroll.token"), secret["enroll"]+"\n")
	st, err := stack.Open(filepath.Join(stackDir, "stack.json"))
	if err != nil {
		t.Fatal(err)
	}
	pre := []preflight.Result{{Check: "egress to imsd", Status: preflight.Fail, Detail: text, Fix: text}}

	var buf bytes.Buffer
	names, err := supportbundle.Write(context.Background(), &buf, supportbundle.Options{StateDir: state, Stack: st, SecretsFile: secretsFile,
		Preflight: pre, Version: "agentd test", AgentLog: agentLog})
	if err != nil {
		t.Fatal(err)
	}
	files := untar(t, buf.Bytes())
	for _, want := range []string{"version.txt", "config/identity.json", "config/stack.json", "permissions/permissions.json",
		"permissions/breakglass.json", "preflight.txt", "preflight.json", "logs/job_1-1.log", "audit/install.jsonl", "audit/agent.jsonl", "egress/ledger.jsonl", "agentd.log"} {
		if _, ok := files[want]; !ok {
			t.Errorf("bundle lacks %s (has %v)", want, names)
		}
	}
	for file, data := range files {
		for name, v := range secret {
			for form, enc := range forms(v) {
				if strings.Contains(data, enc) {
					t.Errorf("%s: %s survives %s: %q", file, name, form, enc)
				}
			}
		}
		for _, k := range keyForms {
			if strings.Contains(data, k) {
				t.Errorf("%s: the agent's private key survives", file)
			}
		}
	}
	// The audit files held secrets (planted): masked, and the manifest
	// says so, naming the record, with the original's digest.
	for _, f := range []string{"audit/install.jsonl", "audit/agent.jsonl"} {
		if !strings.Contains(manifestLine(files, f), "REDACTED: records 1 hold a value the agent knows to be secret") ||
			!strings.Contains(manifestLine(files, f), "sha256 ") {
			t.Errorf("manifest of %s: %q", f, manifestLine(files, f))
		}
	}
	if l := manifestLine(files, "egress/ledger.jsonl"); !strings.Contains(l, "the egress ledger") || !strings.Contains(l, "secrets masked") ||
		!strings.Contains(files["egress/ledger.jsonl"], `"kind":"logs","job":"job_1"`) {
		t.Errorf("egress ledger: manifest %q, file %s", l, files["egress/ledger.jsonl"])
	}
	// What is not secret stays readable.
	if !strings.Contains(files["config/identity.json"], "agt_1") || !strings.Contains(files["logs/job_1-1.log"], "license_key plain: ***\n") {
		t.Errorf("identity %s\nlog %s", files["config/identity.json"], files["logs/job_1-1.log"])
	}
}

func untar(t *testing.T, b []byte) map[string]string {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimPrefix(h.Name, "support-bundle/")] = string(data)
	}
}

// manifestLine is the bundle manifest's line for file name.
func manifestLine(files map[string]string, name string) string {
	for l := range strings.Lines(files[supportbundle.ManifestName]) {
		if strings.HasPrefix(l, name+"\t") {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// A file longer than the 8 MiB a file may have in a bundle keeps its
// newest 8 MiB from a line's start, behind a marker line that says what
// was cut, and the manifest says so with the original size; shorter
// files are whole and say nothing of the kind.
func TestBundleSaysWhatItCut(t *testing.T) {
	state := t.TempDir()
	var big strings.Builder
	for i := 0; big.Len() <= 9<<20; i++ {
		fmt.Fprintf(&big, "stdout\tline %07d of a long job log\n", i)
	}
	write(t, filepath.Join(state, "logs", "big-1.log"), big.String())
	write(t, filepath.Join(state, "logs", "small-1.log"), "stdout\tshort\n")
	var buf bytes.Buffer
	if _, err := supportbundle.Write(context.Background(), &buf, supportbundle.Options{StateDir: state, Version: "agentd test"}); err != nil {
		t.Fatal(err)
	}
	files := untar(t, buf.Bytes())
	got := files["logs/big-1.log"]
	marker, rest, _ := strings.Cut(got, "\n")
	size := big.Len()
	if !strings.HasPrefix(marker, "[support-bundle: ") || !strings.Contains(marker, fmt.Sprintf("had %d bytes", size)) {
		t.Errorf("no marker line: %q", marker)
	}
	if len(rest) > 8<<20 || !strings.HasSuffix(big.String(), rest) || !strings.HasPrefix(rest, "stdout\tline ") {
		t.Errorf("kept %d bytes, a suffix of the log from a line start: %v, %q...", len(rest), strings.HasSuffix(big.String(), rest), rest[:40])
	}
	if m := manifestLine(files, "logs/big-1.log"); !strings.Contains(m, fmt.Sprintf("CUT: the original had %d bytes; the first %d left out", size, size-len(rest))) {
		t.Errorf("manifest line %q", m)
	}
	if files["logs/small-1.log"] != "stdout\tshort\n" || strings.Contains(manifestLine(files, "logs/small-1.log"), "CUT") || manifestLine(files, "logs/small-1.log") == "" {
		t.Errorf("small log %q, manifest %q", files["logs/small-1.log"], manifestLine(files, "logs/small-1.log"))
	}
}

// The audit chain files go into the bundle byte for byte when no secret
// the agent knows appears in them (records carry none by design), so the
// bundled copy verifies as the agent's does (what agentd audit verify
// checks: auditlog.ReadFile, then auditchain.Verify), and the manifest
// says they are verbatim, that the chain verifies, and its head.
func TestBundledAuditChainVerifies(t *testing.T) {
	state := t.TempDir()
	install, err := auditlog.Open(filepath.Join(auditlog.Dir(state), auditlog.InstallFile), "ins_1")
	if err != nil {
		t.Fatal(err)
	}
	var prev *auditchain.Record
	var rs []auditchain.Record
	for i, kind := range []string{"install.created", "operator.call", "job.queued", "job.assigned"} {
		d, _ := auditlog.EncodeData(map[string]string{"n": fmt.Sprint(i), "role": "admin", "note": "<&> \"quoted\" \u00e9"})
		r := auditchain.Next(prev, auditchain.Record{Chain: "ins_1", At: int64(i + 1), Kind: kind, Actor: "token:admin", Subject: "job:j1", Data: d})
		rs = append(rs, r)
		prev = &rs[len(rs)-1]
	}
	if err := install.AppendCopy(rs); err != nil {
		t.Fatal(err)
	}
	install.Close()
	journal, err := auditlog.Open(filepath.Join(auditlog.Dir(state), auditlog.AgentFile), auditlog.AgentChain("agt_1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"assignment.refused", "job.not_started"} {
		if _, err := journal.Add(auditchain.Record{At: 1, Kind: k, Actor: "agent:agt_1", Subject: "job:j1", Data: "{}"}); err != nil {
			t.Fatal(err)
		}
	}
	journal.Close()
	secretsFile := filepath.Join(t.TempDir(), "secrets")
	write(t, secretsFile, "DB_PASSWORD=s3cr3t-not-in-any-record\n")

	var buf bytes.Buffer
	if _, err := supportbundle.Write(context.Background(), &buf, supportbundle.Options{StateDir: state, SecretsFile: secretsFile, Version: "agentd test"}); err != nil {
		t.Fatal(err)
	}
	files := untar(t, buf.Bytes())
	out := t.TempDir()
	for _, f := range []string{auditlog.InstallFile, auditlog.AgentFile} {
		orig, _ := os.ReadFile(filepath.Join(auditlog.Dir(state), f))
		if files["audit/"+f] != string(orig) {
			t.Errorf("audit/%s is not the agent's file byte for byte", f)
		}
		p := filepath.Join(out, f)
		write(t, p, files["audit/"+f])
		got, err := auditlog.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if p := auditchain.Verify(got); p != nil || len(got) == 0 {
			t.Errorf("the bundled %s does not verify: %v (%d records)", f, p, len(got))
		}
		if m := manifestLine(files, "audit/"+f); !strings.Contains(m, "VERBATIM") || !strings.Contains(m, "its chain verifies") {
			t.Errorf("manifest of %s: %q", f, m)
		}
	}
}
