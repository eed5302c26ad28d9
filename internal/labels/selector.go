package labels

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Op is the operator of one requirement.
type Op int

// The operators, with their selector syntax.
const (
	Exists       Op = iota + 1 // key
	DoesNotExist               // !key
	Equals                     // key=value, key==value
	NotEquals                  // key!=value
	In                         // key in (v1,v2)
	NotIn                      // key notin (v1,v2)
	GreaterThan                // key>5 (the value an integer)
	LessThan                   // key<5
)

// Requirement is one condition of a selector.
type Requirement struct {
	Key string
	Op  Op
	// Values are the values of =, !=, in, notin, > and < (sorted, once
	// each); none for Exists and DoesNotExist.
	Values []string
}

// Matches says whether labels l satisfy r. A missing key satisfies only
// DoesNotExist, != and notin.
func (r Requirement) Matches(l map[string]string) bool {
	v, ok := l[r.Key]
	switch r.Op {
	case Exists:
		return ok
	case DoesNotExist:
		return !ok
	case Equals, In:
		return ok && slices.Contains(r.Values, v)
	case NotEquals, NotIn:
		return !ok || !slices.Contains(r.Values, v)
	case GreaterThan, LessThan:
		if !ok || len(r.Values) != 1 {
			return false
		}
		have, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return false
		}
		want, _ := strconv.ParseInt(r.Values[0], 10, 64)
		if r.Op == GreaterThan {
			return have > want
		}
		return have < want
	}
	return false
}

// String writes r in selector syntax.
func (r Requirement) String() string {
	switch r.Op {
	case Exists:
		return r.Key
	case DoesNotExist:
		return "!" + r.Key
	case Equals:
		return r.Key + "=" + r.Values[0]
	case NotEquals:
		return r.Key + "!=" + r.Values[0]
	case In:
		return r.Key + " in (" + strings.Join(r.Values, ",") + ")"
	case NotIn:
		return r.Key + " notin (" + strings.Join(r.Values, ",") + ")"
	case GreaterThan:
		return r.Key + ">" + r.Values[0]
	case LessThan:
		return r.Key + "<" + r.Values[0]
	}
	return "?"
}

// Selector is a parsed label selector: every requirement must hold. The
// zero Selector (from "") matches everything.
type Selector struct {
	reqs []Requirement
}

// Matches says whether labels l satisfy every requirement of s.
func (s Selector) Matches(l map[string]string) bool {
	for _, r := range s.reqs {
		if !r.Matches(l) {
			return false
		}
	}
	return true
}

// Empty says whether s matches everything.
func (s Selector) Empty() bool { return len(s.reqs) == 0 }

// Requirements returns s's requirements, sorted by key.
func (s Selector) Requirements() []Requirement { return slices.Clone(s.reqs) }

// String writes s in selector syntax, requirements sorted by key.
func (s Selector) String() string {
	parts := make([]string, len(s.reqs))
	for i, r := range s.reqs {
		parts[i] = r.String()
	}
	return strings.Join(parts, ",")
}

// MustParse is Parse for selectors written in code; it panics on error.
func MustParse(s string) Selector {
	sel, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return sel
}

// Parse reads a selector in kubectl's syntax. The error says what it
// found where and names a bad key or value. "" (or only blanks) matches
// everything.
func Parse(s string) (Selector, error) {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return Selector{}, fmt.Errorf("selector: a NUL byte at offset %d", i)
	}
	p := &parser{}
	l := lexer{s: s}
	for {
		t := l.lex()
		p.items = append(p.items, t)
		if t.tok == tokEnd || t.tok == tokError {
			break
		}
	}
	reqs, err := p.parse()
	if err != nil {
		return Selector{}, fmt.Errorf("selector %q: %w", s, err)
	}
	slices.SortStableFunc(reqs, func(a, b Requirement) int { return strings.Compare(a.Key, b.Key) })
	return Selector{reqs: reqs}, nil
}

// LooksLikeSelector says whether a filter text is meant as a selector
// rather than a substring: it holds '=', '!', '<', '>' or " in (" /
// " notin (". The console's '/' filter uses it.
func LooksLikeSelector(s string) bool {
	return strings.ContainsAny(s, "=!<>") || strings.Contains(s, " in (") || strings.Contains(s, " notin (")
}

type token int

const (
	tokError token = iota
	tokEnd
	tokIdent
	tokClose
	tokComma
	tokNot
	tokDoubleEq
	tokEq
	tokGt
	tokIn
	tokLt
	tokNotEq
	tokNotIn
	tokOpen
)

var literals = map[string]token{
	")": tokClose, ",": tokComma, "!": tokNot, "==": tokDoubleEq, "=": tokEq, ">": tokGt,
	"in": tokIn, "<": tokLt, "!=": tokNotEq, "notin": tokNotIn, "(": tokOpen,
}

type item struct {
	tok token
	lit string
}

type lexer struct {
	s   string
	pos int
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

func isSymbol(c byte) bool {
	switch c {
	case '=', '!', '(', ')', ',', '>', '<':
		return true
	}
	return false
}

func (l *lexer) lex() item {
	for l.pos < len(l.s) && isSpace(l.s[l.pos]) {
		l.pos++
	}
	if l.pos == len(l.s) {
		return item{tokEnd, ""}
	}
	start := l.pos
	if !isSymbol(l.s[l.pos]) {
		for l.pos < len(l.s) && !isSymbol(l.s[l.pos]) && !isSpace(l.s[l.pos]) {
			l.pos++
		}
		w := l.s[start:l.pos]
		if t, ok := literals[w]; ok {
			return item{t, w}
		}
		return item{tokIdent, w}
	}
	// The longest run of symbols that is an operator, as Kubernetes' lexer
	// reads it: extend while the run is still an operator.
	var last item
	for l.pos < len(l.s) && isSymbol(l.s[l.pos]) {
		run := l.s[start : l.pos+1]
		if t, ok := literals[run]; ok {
			last = item{t, run}
		} else if last.tok != tokError {
			break
		}
		l.pos++
	}
	if last.tok == tokError {
		return item{tokError, l.s[start:l.pos]}
	}
	return last
}

type parser struct {
	items []item
	pos   int
}

// peek and next return the current item; in a value position the
// keywords in and notin are plain words.
func (p *parser) peek(values bool) item {
	it := p.items[min(p.pos, len(p.items)-1)]
	if values && (it.tok == tokIn || it.tok == tokNotIn) {
		it.tok = tokIdent
	}
	return it
}

func (p *parser) next(values bool) item {
	it := p.peek(values)
	if p.pos < len(p.items)-1 {
		p.pos++
	}
	return it
}

func found(it item) string {
	switch it.tok {
	case tokEnd:
		return "the end"
	case tokError:
		return fmt.Sprintf("%q, which is not an operator", it.lit)
	}
	return fmt.Sprintf("%q", it.lit)
}

func (p *parser) parse() ([]Requirement, error) {
	var reqs []Requirement
	for {
		it := p.peek(true)
		switch it.tok {
		case tokEnd:
			return reqs, nil
		case tokIdent, tokNot:
		default:
			return nil, fmt.Errorf("found %s, expected a key or !key", found(it))
		}
		r, err := p.requirement()
		if err != nil {
			return nil, err
		}
		reqs = append(reqs, r)
		switch it := p.next(true); it.tok {
		case tokEnd:
			return reqs, nil
		case tokComma:
			if n := p.peek(true); n.tok != tokIdent && n.tok != tokNot {
				return nil, fmt.Errorf("found %s after ',', expected a key or !key", found(n))
			}
		default:
			return nil, fmt.Errorf("found %s after %s, expected ',' or the end", found(it), r)
		}
	}
}

func (p *parser) requirement() (Requirement, error) {
	r := Requirement{}
	it := p.next(true)
	if it.tok == tokNot {
		r.Op = DoesNotExist
		it = p.next(true)
	}
	if it.tok != tokIdent {
		return r, fmt.Errorf("found %s, expected a key", found(it))
	}
	r.Key = it.lit
	if err := ValidateKey(r.Key); err != nil {
		return r, err
	}
	if n := p.peek(true); n.tok == tokEnd || n.tok == tokComma {
		if r.Op != DoesNotExist {
			r.Op = Exists
		}
		return r, nil
	}
	if r.Op == DoesNotExist {
		// "!a=b": Kubernetes reads an operator after !key and refuses
		// it when making the requirement.
		if _, err := p.operator(); err != nil {
			return r, err
		}
		return r, fmt.Errorf("!%s takes no operator or value (write !%s alone, or %s!=VALUE)", r.Key, r.Key, r.Key)
	}
	op, err := p.operator()
	if err != nil {
		return r, err
	}
	r.Op = op
	var vals []string
	switch op {
	case In, NotIn:
		vals, err = p.valueSet()
	default:
		vals, err = p.exactValue()
	}
	if err != nil {
		return r, err
	}
	slices.Sort(vals)
	r.Values = slices.Compact(vals)
	if op == GreaterThan || op == LessThan {
		if _, err := strconv.ParseInt(r.Values[0], 10, 64); err != nil {
			return r, fmt.Errorf("%s: the value %q of > or < must be an integer", r.Key, r.Values[0])
		}
	}
	for _, v := range r.Values {
		if err := ValidateValue(r.Key, v); err != nil {
			return r, err
		}
	}
	return r, nil
}

func (p *parser) operator() (Op, error) {
	it := p.next(false)
	switch it.tok {
	case tokIn:
		return In, nil
	case tokNotIn:
		return NotIn, nil
	case tokEq, tokDoubleEq:
		return Equals, nil
	case tokNotEq:
		return NotEquals, nil
	case tokGt:
		return GreaterThan, nil
	case tokLt:
		return LessThan, nil
	}
	return 0, fmt.Errorf("found %s, expected an operator: =, ==, !=, in, notin, >, <", found(it))
}

// valueSet reads "(v1,v2)". As in Kubernetes, an empty entry is the
// empty value: "()" is ("") and "(a,)" is (a,"").
func (p *parser) valueSet() ([]string, error) {
	if it := p.next(true); it.tok != tokOpen {
		return nil, fmt.Errorf("found %s, expected '(' after in/notin", found(it))
	}
	switch it := p.peek(true); it.tok {
	case tokClose:
		p.next(true)
		return []string{""}, nil
	case tokIdent, tokComma:
	default:
		return nil, fmt.Errorf("found %s, expected a value, ',' or ')'", found(it))
	}
	var vals []string
	for {
		it := p.next(true)
		switch it.tok {
		case tokIdent:
			vals = append(vals, it.lit)
			switch n := p.peek(true); n.tok {
			case tokComma:
				continue
			case tokClose:
				p.next(true)
				return vals, nil
			default:
				return nil, fmt.Errorf("found %s, expected ',' or ')'", found(n))
			}
		case tokComma:
			if len(vals) == 0 {
				vals = append(vals, "")
			}
			switch p.peek(true).tok {
			case tokClose:
				p.next(true)
				return append(vals, ""), nil
			case tokComma:
				vals = append(vals, "")
			}
		default:
			return nil, fmt.Errorf("found %s, expected a value or ','", found(it))
		}
	}
}

// exactValue reads the value after =, ==, !=, > or <; none at the end or
// before ',' is the empty value.
func (p *parser) exactValue() ([]string, error) {
	switch it := p.peek(true); it.tok {
	case tokEnd, tokComma:
		return []string{""}, nil
	case tokIdent:
		p.next(true)
		return []string{it.lit}, nil
	default:
		return nil, fmt.Errorf("found %s, expected a value", found(it))
	}
}
