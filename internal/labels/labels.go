// Package labels is install labels (key=value, validated as Kubernetes
// validates label keys and values) and label selectors in kubectl's
// syntax: "tier=canary", "tier!=canary", "region in (eu,us)", "region
// notin (ap)", "customer" (the key is set), "!customer" (it is not),
// requirements joined by commas (all must hold).
//
// It is a port of k8s.io/apimachinery/pkg/labels' parser and matcher
// (selector_test.go checks it against that package, FuzzParse included),
// written out because that package links klog and k8s.io/utils into every
// binary that parses a selector (imsd, the CLI, the console).
//
// It imports only the standard library.
package labels

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// MaxKeyNameLength and MaxValueLength are Kubernetes' limits.
const (
	MaxKeyNameLength = 63
	MaxValueLength   = 63
	maxPrefixLength  = 253
)

var (
	nameRE      = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
	valueRE     = regexp.MustCompile(`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`)
	subdomainRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// ValidateKey says what is wrong with label key k, or nil: a name of at
// most 63 letters, digits, '-', '_' and '.' that starts and ends with a
// letter or digit, with an optional DNS subdomain prefix and '/'
// ("example.com/tier").
func ValidateKey(k string) error {
	name := k
	if prefix, n, ok := strings.Cut(k, "/"); ok {
		name = n
		switch {
		case strings.Contains(n, "/"):
			return fmt.Errorf("label key %q: has more than one '/' (a key is NAME or PREFIX/NAME)", k)
		case prefix == "":
			return fmt.Errorf("label key %q: the prefix before '/' is empty", k)
		case len(prefix) > maxPrefixLength:
			return fmt.Errorf("label key %q: the prefix is longer than %d characters", k, maxPrefixLength)
		case !subdomainRE.MatchString(prefix):
			return fmt.Errorf("label key %q: the prefix must be a DNS subdomain (lowercase letters, digits, '-' and '.', such as example.com)", k)
		}
	}
	switch {
	case name == "":
		return fmt.Errorf("label key %q: the name is empty", k)
	case len(name) > MaxKeyNameLength:
		return fmt.Errorf("label key %q: the name is longer than %d characters", k, MaxKeyNameLength)
	case !nameRE.MatchString(name):
		return fmt.Errorf("label key %q: the name must be letters, digits, '-', '_' and '.', starting and ending with a letter or digit", k)
	}
	return nil
}

// ValidateValue says what is wrong with value v of label key k, or nil:
// empty, or at most 63 letters, digits, '-', '_' and '.' that start and
// end with a letter or digit.
func ValidateValue(k, v string) error {
	switch {
	case len(v) > MaxValueLength:
		return fmt.Errorf("label %q: the value is longer than %d characters", k, MaxValueLength)
	case !valueRE.MatchString(v):
		return fmt.Errorf("label %q: the value %q must be empty or letters, digits, '-', '_' and '.', starting and ending with a letter or digit", k, v)
	}
	return nil
}

// Validate checks every key and value of m, in key order, and returns the
// first problem (it names the key).
func Validate(m map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if err := ValidateKey(k); err != nil {
			return err
		}
		if err := ValidateValue(k, m[k]); err != nil {
			return err
		}
	}
	return nil
}

// Format writes labels as "k=v,k2=v2", keys sorted; "" for none.
func Format(m map[string]string) string {
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(m[k])
	}
	return b.String()
}

// Change is a label edit in kubectl label's form: Set are k=v, Remove are
// the keys of k- arguments.
type Change struct {
	Set    map[string]string
	Remove []string
}

// ParseChange reads kubectl label's arguments: "k=v" sets, "k-" removes.
// It checks each key and value and refuses a key named twice.
func ParseChange(args []string) (Change, error) {
	c := Change{Set: map[string]string{}}
	seen := map[string]bool{}
	for _, a := range args {
		var k string
		if kk, v, ok := strings.Cut(a, "="); ok {
			k = kk
			if err := ValidateKey(k); err != nil {
				return Change{}, err
			}
			if err := ValidateValue(k, v); err != nil {
				return Change{}, err
			}
			c.Set[k] = v
		} else if kk, ok := strings.CutSuffix(a, "-"); ok {
			k = kk
			if err := ValidateKey(k); err != nil {
				return Change{}, err
			}
			c.Remove = append(c.Remove, k)
		} else {
			return Change{}, fmt.Errorf("%q is neither KEY=VALUE (set) nor KEY- (remove)", a)
		}
		if seen[k] {
			return Change{}, fmt.Errorf("label %q is named twice", k)
		}
		seen[k] = true
	}
	return c, nil
}

// Apply returns cur with c applied. An existing key set to a different
// value is refused unless overwrite (as kubectl label does); removing a
// key that is not there is not an error.
func (c Change) Apply(cur map[string]string, overwrite bool) (map[string]string, error) {
	out := maps.Clone(cur)
	if out == nil {
		out = map[string]string{}
	}
	for _, k := range slices.Sorted(maps.Keys(c.Set)) {
		if old, ok := out[k]; ok && old != c.Set[k] && !overwrite {
			return nil, fmt.Errorf("label %q already has a value (%q); pass overwrite (--overwrite) to change it", k, old)
		}
		out[k] = c.Set[k]
	}
	for _, k := range c.Remove {
		delete(out, k)
	}
	return out, nil
}
