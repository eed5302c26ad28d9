package agentproto

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits on a job's config. The agent enforces them on every assignment
// (ConfigDigest refuses a config past any of them, so the agent never
// acks it), imsd's wire side enforces them when it encodes an assignment,
// and imsd enforces them again, through CheckConfig, wherever a config
// is accepted: a job at enqueue, a component's config (and an install's
// override of it) in an app revision, a workflow step's rendered config.
// A config that passed there is one every agent of this version takes.
const (
	// MaxConfigDepth is how deep a value may sit below the config's top
	// object (whose own keys' values are at depth 1). Protobuf's decoder
	// stops at 10,000 nested messages, and a config level is two or three
	// of them (Struct, Value, ListValue).
	MaxConfigDepth = 100
	// MaxConfigBytes bounds the config's canonical encoding (see
	// ConfigDigest): the plugin a job runs gets its config in one gRPC
	// message, which may be at most 4 MiB, and secrets substituted on the
	// agent make it grow.
	MaxConfigBytes = 1 << 20
	// MaxConfigKeys bounds the keys of one object.
	MaxConfigKeys = 10_000
	// MaxConfigItems bounds the items of one list.
	MaxConfigItems = 100_000
	// MaxConfigKeyBytes bounds the length of one key.
	MaxConfigKeyBytes = 1024
)

// A ConfigError says where a config breaks a limit (or holds a value no
// config may hold) and which.
type ConfigError struct {
	// Path is the value's path from the config's top: "" for the top,
	// then ".key" for an identifier key, `["key"]` for any other, and
	// "[i]" for a list item, each as written in JSON. A path longer than
	// 200 bytes is shortened in its middle.
	Path string
	// Problem says what is wrong, with the limit when one is broken.
	Problem string
}

func (e *ConfigError) Error() string { return "config" + e.Path + ": " + e.Problem }

// CheckConfig says whether cfg is within the limits above and holds only
// values a job config may hold: objects (map[string]any), lists ([]any),
// strings (UTF-8), finite numbers (float64, or int64 and int as a TOML or
// Go caller has them), booleans and null; []string and map[string]string
// are taken as the lists and objects they encode to in JSON. It returns a *ConfigError, or
// nil. It walks what ConfigDigest walks, with the same checks.
func CheckConfig(cfg map[string]any) error {
	w := configWalker{lenient: true}
	if cfg == nil {
		return nil
	}
	return w.walk(cfg, 0)
}

// configWalker walks a config for CheckConfig and ConfigDigest: when
// encode is set it appends the canonical encoding to b, else it only
// counts its length in n.
type configWalker struct {
	encode bool
	// lenient takes int64 and int as numbers (CheckConfig); the digest
	// is only ever computed over decoded JSON, whose numbers are float64.
	lenient bool
	// plan walks a planned change's value for PlanDigest: only the depth
	// is bounded, as it was before the other limits existed.
	plan bool
	b    []byte
	n    int
}

// pathError is a problem found at depth, its path's steps appended as
// the walk unwinds (so a config without problems builds no path).
type pathError struct {
	steps   []string // innermost first
	problem string
}

func (e *pathError) Error() string { return e.problem }

func (w *configWalker) grow(k int) error {
	w.n += k
	if w.n > MaxConfigBytes && !w.plan {
		return &pathError{problem: fmt.Sprintf("the config is more than %d bytes in its canonical encoding (the limit is %d)", MaxConfigBytes, MaxConfigBytes)}
	}
	return nil
}

func (w *configWalker) str(s string) {
	if w.encode {
		w.b = appendString(w.b, s)
	}
}

func (w *configWalker) walk(v map[string]any, depth int) error {
	if err := w.value(v, depth); err != nil {
		return toConfigError(err)
	}
	return nil
}

func (w *configWalker) value(v any, depth int) error {
	if depth > MaxConfigDepth {
		return &pathError{problem: fmt.Sprintf("nested deeper than %d levels (the limit is %d)", MaxConfigDepth, MaxConfigDepth)}
	}
	switch v := v.(type) {
	case nil:
		return w.tag('n', 0)
	case bool:
		if v {
			return w.tag('t', 0)
		}
		return w.tag('f', 0)
	case float64:
		return w.number(v)
	case int64:
		if !w.lenient {
			break
		}
		return w.number(float64(v))
	case int:
		if !w.lenient {
			break
		}
		return w.number(float64(v))
	case string:
		if !w.plan && !utf8.ValidString(v) {
			return &pathError{problem: "is not valid UTF-8"}
		}
		if err := w.tag('s', 4+len(v)); err != nil {
			return err
		}
		w.str(v)
		return nil
	case []string:
		if !w.lenient {
			break
		}
		l := make([]any, len(v))
		for i, x := range v {
			l[i] = x
		}
		return w.value(l, depth)
	case map[string]string:
		if !w.lenient {
			break
		}
		m := make(map[string]any, len(v))
		for k, x := range v {
			m[k] = x
		}
		return w.value(m, depth)
	case []any:
		if len(v) > MaxConfigItems && !w.plan {
			return &pathError{problem: fmt.Sprintf("is a list of %d items (the limit is %d)", len(v), MaxConfigItems)}
		}
		if err := w.tag('l', 4); err != nil {
			return err
		}
		if w.encode {
			w.b = binary.BigEndian.AppendUint32(w.b, uint32(len(v)))
		}
		for i, x := range v {
			if err := w.value(x, depth+1); err != nil {
				return addStep(err, "["+strconv.Itoa(i)+"]")
			}
		}
		return nil
	case map[string]any:
		if len(v) > MaxConfigKeys && !w.plan {
			return &pathError{problem: fmt.Sprintf("is an object of %d keys (the limit is %d)", len(v), MaxConfigKeys)}
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, strings.Compare)
		if err := w.tag('o', 4); err != nil {
			return err
		}
		if w.encode {
			w.b = binary.BigEndian.AppendUint32(w.b, uint32(len(v)))
		}
		for _, k := range keys {
			if !w.plan {
				if len(k) > MaxConfigKeyBytes {
					return addStep(&pathError{problem: fmt.Sprintf("the key is %d bytes long (the limit is %d)", len(k), MaxConfigKeyBytes)}, keyStep(k))
				}
				if !utf8.ValidString(k) {
					return addStep(&pathError{problem: "the key is not valid UTF-8"}, keyStep(k))
				}
			}
			if err := w.grow(4 + len(k)); err != nil {
				return err
			}
			w.str(k)
			if err := w.value(v[k], depth+1); err != nil {
				return addStep(err, keyStep(k))
			}
		}
		return nil
	}
	return &pathError{problem: fmt.Sprintf("a value of type %T has no place in a config (it has no canonical encoding)", v)}
}

// tag accounts for a one-byte tag and more bytes after it, appending the
// tag when encoding (the caller appends the rest).
func (w *configWalker) tag(t byte, more int) error {
	if err := w.grow(1 + more); err != nil {
		return err
	}
	if w.encode {
		w.b = append(w.b, t)
	}
	return nil
}

func (w *configWalker) number(f float64) error {
	if !w.plan && (math.IsNaN(f) || math.IsInf(f, 0)) {
		return &pathError{problem: fmt.Sprintf("%v is not a finite number (JSON has no NaN or infinity)", f)}
	}
	if err := w.tag('d', 8); err != nil {
		return err
	}
	if w.encode {
		w.b = binary.BigEndian.AppendUint64(w.b, math.Float64bits(f))
	}
	return nil
}

func addStep(err error, step string) error {
	if pe, ok := err.(*pathError); ok {
		pe.steps = append(pe.steps, step)
	}
	return err
}

func toConfigError(err error) error {
	pe, ok := err.(*pathError)
	if !ok {
		return err
	}
	var b strings.Builder
	for i := len(pe.steps) - 1; i >= 0; i-- {
		b.WriteString(pe.steps[i])
	}
	return &ConfigError{Path: shortenPath(b.String(), len(pe.steps)), Problem: pe.problem}
}

// maxPathBytes is how long a path in a ConfigError may be before it is
// shortened.
const maxPathBytes = 200

func shortenPath(p string, steps int) string {
	if len(p) <= maxPathBytes {
		return p
	}
	head, tail := p[:maxPathBytes/2], p[len(p)-maxPathBytes/2:]
	// Cut on valid UTF-8 boundaries.
	for len(head) > 0 && !utf8.ValidString(head) {
		head = head[:len(head)-1]
	}
	for len(tail) > 0 && !utf8.ValidString(tail) {
		tail = tail[1:]
	}
	return fmt.Sprintf("%s…(%d levels in all)…%s", head, steps, tail)
}

// keyStep is one key as a path step: ".key" when it is an identifier,
// else `["key"]`.
func keyStep(k string) string {
	if isIdent(k) {
		return "." + k
	}
	if len(k) > 64 {
		k = k[:64]
		for len(k) > 0 && !utf8.ValidString(k) {
			k = k[:len(k)-1]
		}
		return "[" + strconv.Quote(k) + "…]"
	}
	return "[" + strconv.Quote(k) + "]"
}

func isIdent(k string) bool {
	if k == "" || len(k) > 64 {
		return false
	}
	for i, r := range k {
		switch {
		case r == '_' || r == '-' || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z'):
		case '0' <= r && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
