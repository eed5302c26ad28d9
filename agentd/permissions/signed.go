package permissions

// The customer's control files (permissions.json, breakglass.json) carry
// their own proof: only the customer's commands (agentd permissions,
// agentd breakglass) write them, and they sign every write with the
// agent's Ed25519 identity key (identity.json, 0600, which no vendor code
// can read). The signature covers a domain string, the file's name, the
// agent and install it is for, the key's id, a generation that grows by
// one with every write, and the canonical bytes of the content (the
// content parsed strictly and marshalled again, so what is signed is what
// is enforced). A file that is unsigned, badly signed, for another agent,
// older than the newest generation this agent accepted (rollback), or
// removed after one was accepted, is refused: the agent then refuses
// every job. See docs/customer/control-files.md.

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/byoc-dev/byoc/agentd/auditlog"
	"github.com/byoc-dev/byoc/agentd/identity"
)

// Format is the signed file's format name.
const Format = "byoc-control-file/v1"

// signDomain starts every signed message, so that no other signature of
// the agent's key (a message to imsd) reads as a control file's.
const signDomain = "byoc customer control file v1\n"

// MaxFileSize bounds a control file; a larger one is refused unread.
const MaxFileSize = 1 << 20

// Key checks (and with Private set, signs) the control files of one
// agent.
type Key struct {
	// AgentID and InstallID are the agent's; both empty before enrolment.
	AgentID, InstallID string
	Public             ed25519.PublicKey
	Private            ed25519.PrivateKey
	// Next is the agent's next key while a rotation of its key is under
	// way (identity.Rotation): a file signed with it verifies too, so
	// that a rotation stopped at any step leaves every file verifying.
	Next ed25519.PublicKey
}

// KeyOf is the Key of an agent's identity.
func KeyOf(id identity.Identity) Key {
	return Key{AgentID: id.AgentID, InstallID: id.InstallID, Public: id.PrivateKey.Public().(ed25519.PublicKey), Private: id.PrivateKey}
}

// KeyID names a public key: the first 16 hex digits of its SHA-256.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// envelope is a signed control file as stored.
type envelope struct {
	Format     string          `json:"format"`
	File       string          `json:"file"`
	AgentID    string          `json:"agent_id"`
	InstallID  string          `json:"install_id"`
	Generation uint64          `json:"generation"`
	KeyID      string          `json:"key_id"`
	Content    json.RawMessage `json:"content"`
	Signature  []byte          `json:"signature"`
}

// signedMessage is what the signature covers: the envelope without the
// signature, content canonical, marshalled (deterministic for a struct).
func (e envelope) signedMessage() []byte {
	b, err := json.Marshal(struct {
		Format     string          `json:"format"`
		File       string          `json:"file"`
		AgentID    string          `json:"agent_id"`
		InstallID  string          `json:"install_id"`
		Generation uint64          `json:"generation"`
		KeyID      string          `json:"key_id"`
		Content    json.RawMessage `json:"content"`
	}{e.Format, e.File, e.AgentID, e.InstallID, e.Generation, e.KeyID, e.Content})
	if err != nil {
		panic(err) // canonical content is valid JSON
	}
	return append([]byte(signDomain), b...)
}

// RefusedError is a control file the agent does not accept.
type RefusedError struct {
	Path string
	// Why says what is wrong ("is not signed").
	Why string
	// Unsigned is set for a file in the format from before signing,
	// which agentd permissions adopt signs as it is.
	Unsigned bool
	// Generation is the generation the file claims, when it could be
	// read (not proof of anything).
	Generation uint64
}

func (e *RefusedError) Error() string {
	hint := "it was not written by agentd permissions or agentd breakglass on this agent: find what changed it, then write a signed one with `agentd permissions reset`"
	if e.Unsigned {
		hint = "a file from before agentd signed the customer's control files, or written by something else: read it (it is plain JSON), then sign it as it is with `agentd permissions adopt`, or write the defaults signed with `agentd permissions reset`"
	}
	return fmt.Sprintf("%s %s (%s)", e.Path, e.Why, hint)
}

// IsRefused reports whether err is a refused control file.
func IsRefused(err error) bool {
	var r *RefusedError
	return errors.As(err, &r)
}

// seal signs content as generation gen of the file named file.
func seal[T any](k Key, file string, gen uint64, content T) ([]byte, error) {
	if len(k.Private) != ed25519.PrivateKeySize {
		return nil, errors.New("no key to sign the customer's control file with")
	}
	c, err := json.Marshal(content)
	if err != nil {
		return nil, err
	}
	e := envelope{Format: Format, File: file, AgentID: k.AgentID, InstallID: k.InstallID, Generation: gen,
		KeyID: KeyID(k.Private.Public().(ed25519.PublicKey)), Content: c}
	e.Signature = ed25519.Sign(k.Private, e.signedMessage())
	b, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// open checks the signed file b, read from path, with k, and returns its
// content and generation. Anything that is not a file k signed for this
// agent is a *RefusedError; one whose generation is below minGen too.
func open[T any](k Key, path string, b []byte, minGen uint64) (T, uint64, error) {
	var zero T
	refuse := func(gen uint64, format string, args ...any) (T, uint64, error) {
		return zero, 0, &RefusedError{Path: path, Why: fmt.Sprintf(format, args...), Generation: gen}
	}
	if len(b) > MaxFileSize {
		return refuse(0, "is larger than %d bytes", MaxFileSize)
	}
	var e envelope
	if err := strictJSON(b, &e); err != nil || e.Format == "" {
		// The format from before signing: the content on its own.
		var legacy T
		if strictJSON(b, &legacy) == nil {
			return zero, 0, &RefusedError{Path: path, Why: "is not signed", Unsigned: true}
		}
		if err == nil {
			err = errors.New(`no "format"`)
		}
		return refuse(0, "is not a signed control file: %v", err)
	}
	file := filepath.Base(path)
	switch {
	case e.Format != Format:
		return refuse(e.Generation, "has format %q, want %q", e.Format, Format)
	case e.File != file:
		return refuse(e.Generation, "was signed as %q, not %q", e.File, file)
	case e.Generation == 0:
		return refuse(e.Generation, "has no generation")
	case k.AgentID != "" && e.AgentID != "" && e.AgentID != k.AgentID:
		return refuse(e.Generation, "was signed for agent %s (install %s), not for this agent %s (install %s)", e.AgentID, e.InstallID, k.AgentID, k.InstallID)
	case k.AgentID == "" && e.AgentID != "":
		return refuse(e.Generation, "was signed for agent %s (install %s), and this agent is not enrolled", e.AgentID, e.InstallID)
	case e.AgentID != "" && e.InstallID != k.InstallID:
		return refuse(e.Generation, "was signed for install %s, not for this agent's install %s", e.InstallID, k.InstallID)
	case e.AgentID == "" && e.InstallID != "":
		return refuse(e.Generation, "names install %s but no agent", e.InstallID)
	case len(k.Public) != ed25519.PublicKeySize:
		return refuse(e.Generation, "cannot be checked: this agent has no key")
	case e.KeyID != KeyID(k.Public) && (len(k.Next) != ed25519.PublicKeySize || e.KeyID != KeyID(k.Next)):
		return refuse(e.Generation, "was signed with key %s, not this agent's key %s", e.KeyID, KeyID(k.Public))
	}
	pub := k.Public
	if e.KeyID != KeyID(k.Public) {
		pub = k.Next
	}
	var v T
	if err := strictJSON(e.Content, &v); err != nil {
		return refuse(e.Generation, "content: %v", err)
	}
	canon, err := json.Marshal(v)
	if err != nil {
		return refuse(e.Generation, "content: %v", err)
	}
	e.Content = canon
	if !ed25519.Verify(pub, e.signedMessage(), e.Signature) {
		return refuse(e.Generation, "was changed after it was signed: its signature does not verify")
	}
	if e.Generation < minGen {
		return refuse(e.Generation, "is generation %d, older than generation %d, which this agent accepted: an earlier copy was put back", e.Generation, minGen)
	}
	return v, e.Generation, nil
}

// strictJSON decodes exactly one JSON value of b into v, refusing
// unknown fields and trailing data.
func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON value")
	}
	return nil
}

// readBounded reads path, at most MaxFileSize+1 bytes; a missing file is
// (nil, nil).
func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if b == nil {
		b = []byte{}
	}
	return b, nil
}

// loadSigned reads the control file at path, checked with k; accepted is
// the newest generation this agent accepted (0: none). A missing file is
// def at generation 0, unless one was accepted: then it was removed
// behind the agent's back, and is refused.
func loadSigned[T any](k Key, path string, accepted uint64, def T) (T, uint64, error) {
	var zero T // on an error: all off, should a caller look
	b, err := readBounded(path)
	if err != nil {
		return zero, 0, err
	}
	if b == nil {
		if accepted > 0 {
			return zero, 0, &RefusedError{Path: path, Why: fmt.Sprintf("is missing, but this agent accepted its generation %d: it was removed", accepted)}
		}
		return def, 0, nil
	}
	return open[T](k, path, b, accepted)
}

// Audit record kinds of the agent's journal (package auditlog) about
// control files; their subject is "file:NAME".
const (
	// KindAccepted records a newer generation the agent accepted: data
	// generation, sha256 of the file, key.
	KindAccepted = "control.accepted"
	// KindRefused records a file the agent refused: data reason.
	KindRefused = "control.refused"
)

// Subject is the journal subject of control file name.
func Subject(name string) string { return "file:" + name }

// Accepted returns the newest generation of each control file (by name)
// that the agent's journal in state dir dir records as accepted.
func Accepted(dir string) (map[string]uint64, error) {
	rs, err := auditlog.ReadFile(filepath.Join(auditlog.Dir(dir), auditlog.AgentFile))
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]uint64{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the agent's journal: %w", err)
	}
	out := map[string]uint64{}
	for _, r := range rs {
		if r.Kind != KindAccepted {
			continue
		}
		var d map[string]string
		if json.Unmarshal([]byte(r.Data), &d) != nil {
			continue
		}
		g, err := strconv.ParseUint(d["generation"], 10, 64)
		if err != nil {
			continue
		}
		if name, ok := strings.CutPrefix(r.Subject, "file:"); ok && g > out[name] {
			out[name] = g
		}
	}
	return out, nil
}

// dirKey returns the Key of the agent in state dir dir (see
// identity.SigningKey); with create, a pre-enrolment key is made when
// there is none. Without a key, ok is false.
func dirKey(dir string, create bool) (k Key, ok bool, err error) {
	id, err := identity.SigningKey(dir, create)
	if errors.Is(err, identity.ErrNotEnrolled) {
		return Key{}, false, nil
	}
	if err != nil {
		return Key{}, false, fmt.Errorf("the key that signs the customer's control files: %w", err)
	}
	k = KeyOf(id)
	if id.AgentID != "" {
		r, err := identity.PendingRotation(dir, id)
		if err != nil {
			return Key{}, false, fmt.Errorf("the agent's key rotation: %w", err)
		}
		if r != nil {
			k.Next = r.Public()
		}
	}
	return k, true, nil
}

// dirAccepted is the newest generation of file name accepted by the agent
// of state dir dir, as its journal records it.
func dirAccepted(dir, name string) (uint64, error) {
	acc, err := Accepted(dir)
	if err != nil {
		return 0, err
	}
	return acc[name], nil
}

// loadDir reads control file name of state dir dir as the customer's
// commands do: checked with the key in dir, against the generation the
// agent's journal records as accepted.
func loadDir[T any](dir, name string, def T) (T, uint64, error) {
	var zero T
	path := filepath.Join(dir, name)
	acc, err := dirAccepted(dir, name)
	if err != nil {
		return zero, 0, err
	}
	k, ok, err := dirKey(dir, false)
	if err != nil {
		return zero, 0, err
	}
	if !ok {
		// No key yet: only a missing file (the defaults) can be read.
		b, err := readBounded(path)
		if err == nil && b != nil {
			_, _, err = open[T](Key{}, path, b, acc)
		}
		if err != nil {
			return zero, 0, err
		}
		return def, 0, nil
	}
	return loadSigned(k, path, acc, def)
}
