package awsfake

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// This file is the fake's IAM policy evaluation: enough of it to enforce
// the session policies the agent sends with AssumeRole and the inline
// role policies a revoke puts, against the fake's own clock. It models
// Effect, Action and Resource (with * and ? wildcards) and the date
// condition operators on aws:CurrentTime, aws:EpochTime and
// aws:TokenIssueTime; a policy using anything else is refused as
// MalformedPolicyDocument ("not modelled by the fake") rather than
// evaluated wrongly.

// policy is a parsed IAM policy document.
type policy struct {
	Statements []statement
}

type statement struct {
	Sid       string
	Effect    string
	Actions   []string
	Resources []string
	// Conditions maps an operator to its keys and their values.
	Conditions map[string]map[string][]string
}

// stringList is IAM's "a string or a list of strings".
type stringList []string

func (l *stringList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*l = []string{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("want a string or a list of strings, got %s", b)
	}
	*l = many
	return nil
}

var dateOps = map[string]func(ctx, val time.Time) bool{
	"DateEquals":            func(c, v time.Time) bool { return c.Equal(v) },
	"DateNotEquals":         func(c, v time.Time) bool { return !c.Equal(v) },
	"DateLessThan":          func(c, v time.Time) bool { return c.Before(v) },
	"DateLessThanEquals":    func(c, v time.Time) bool { return !c.After(v) },
	"DateGreaterThan":       func(c, v time.Time) bool { return c.After(v) },
	"DateGreaterThanEquals": func(c, v time.Time) bool { return !c.Before(v) },
}

var dateKeys = map[string]bool{"aws:currenttime": true, "aws:epochtime": true, "aws:tokenissuetime": true}

// parsePolicy parses and checks a policy document.
func parsePolicy(doc string) (*policy, error) {
	var raw struct {
		Version   string
		Statement json.RawMessage
	}
	dec := json.NewDecoder(strings.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("the policy is not a JSON policy document: %v", err)
	}
	if raw.Version != "2012-10-17" {
		return nil, fmt.Errorf("policy Version %q: want 2012-10-17", raw.Version)
	}
	type rawStatement struct {
		Sid       string
		Effect    string
		Action    stringList
		Resource  stringList
		Condition map[string]map[string]stringList
	}
	var sts []rawStatement
	if err := json.Unmarshal(raw.Statement, &sts); err != nil {
		var one rawStatement
		if err2 := json.Unmarshal(raw.Statement, &one); err2 != nil {
			return nil, fmt.Errorf("policy Statement: %v", err)
		}
		sts = []rawStatement{one}
	}
	p := &policy{}
	for i, s := range sts {
		if s.Effect != "Allow" && s.Effect != "Deny" {
			return nil, fmt.Errorf("policy Statement %d: Effect %q: want Allow or Deny", i, s.Effect)
		}
		if len(s.Action) == 0 || len(s.Resource) == 0 {
			return nil, fmt.Errorf("policy Statement %d: Action and Resource are required (NotAction and NotResource are not modelled by the fake)", i)
		}
		st := statement{Sid: s.Sid, Effect: s.Effect, Actions: s.Action, Resources: s.Resource, Conditions: map[string]map[string][]string{}}
		for op, keys := range s.Condition {
			if dateOps[op] == nil {
				return nil, fmt.Errorf("policy Statement %d: condition operator %s is not modelled by the fake", i, op)
			}
			st.Conditions[op] = map[string][]string{}
			for k, vals := range keys {
				if !dateKeys[strings.ToLower(k)] {
					return nil, fmt.Errorf("policy Statement %d: condition key %s is not modelled by the fake", i, k)
				}
				for _, v := range vals {
					if _, err := parseDate(v); err != nil {
						return nil, fmt.Errorf("policy Statement %d: %s %s: %v", i, op, k, err)
					}
				}
				st.Conditions[op][strings.ToLower(k)] = vals
			}
		}
		p.Statements = append(p.Statements, st)
	}
	return p, nil
}

// parseDate reads a date condition value: ISO 8601 (RFC 3339) or epoch
// seconds, as IAM takes them.
func parseDate(v string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Unix(n, 0), nil
	}
	return time.Time{}, fmt.Errorf("%q is not a date (ISO 8601 or epoch seconds)", v)
}

// request is what a statement is evaluated against.
type request struct {
	Action, Resource string
	// Keys are the condition keys' values, by lower-case name.
	Keys map[string]time.Time
}

func wildcard(pattern, s string, fold bool) bool {
	re := "^" + strings.NewReplacer(`\*`, ".*", `\?`, ".").Replace(regexp.QuoteMeta(pattern)) + "$"
	if fold {
		re = "(?i)" + re
	}
	return regexp.MustCompile(re).MatchString(s)
}

func anyMatch(patterns []string, s string, fold bool) bool {
	for _, p := range patterns {
		if wildcard(p, s, fold) {
			return true
		}
	}
	return false
}

func (st statement) applies(r request) bool {
	if !anyMatch(st.Actions, r.Action, true) || !anyMatch(st.Resources, r.Resource, false) {
		return false
	}
	for op, keys := range st.Conditions {
		for k, vals := range keys {
			c, ok := r.Keys[k]
			if !ok {
				return false
			}
			hit := false
			for _, v := range vals {
				t, _ := parseDate(v)
				if dateOps[op](c, t) {
					hit = true
				}
			}
			if !hit {
				return false
			}
		}
	}
	return true
}

// decide evaluates p for r: "Deny" for an explicit deny (with the
// statement's Sid), "Allow", or "" when no statement applies.
func (p *policy) decide(r request) (effect, sid string) {
	for _, st := range p.Statements {
		if st.Effect == "Deny" && st.applies(r) {
			return "Deny", st.Sid
		}
	}
	for _, st := range p.Statements {
		if st.Effect == "Allow" && st.applies(r) {
			return "Allow", st.Sid
		}
	}
	return "", ""
}
