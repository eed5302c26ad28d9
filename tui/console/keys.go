package console

import (
	"fmt"
	"sort"
	"strings"

	"charm.land/bubbles/v2/key"
)

// Action names a thing a key can do. Key bindings in the config file are
// keyed by these names, and the help screen is generated from them.
type Action string

// The actions. Dangerous ones change something on an install and ask for
// confirmation; in read-only mode they are not bound at all.
const (
	ActQuit       Action = "quit"
	ActHelp       Action = "help"
	ActCommand    Action = "command"
	ActFilter     Action = "filter"
	ActBack       Action = "back"
	ActOpen       Action = "open"
	ActUp         Action = "up"
	ActDown       Action = "down"
	ActPageUp     Action = "page_up"
	ActPageDown   Action = "page_down"
	ActTop        Action = "top"
	ActBottom     Action = "bottom"
	ActSort       Action = "sort"
	ActReverse    Action = "reverse"
	ActFollow     Action = "follow"
	ActNextMatch  Action = "next_match"
	ActPrevMatch  Action = "prev_match"
	ActWrap       Action = "wrap"
	ActTimestamps Action = "timestamps"
	ActLogLevel   Action = "log_level"
	ActRunAction  Action = "run_action"
	ActCancelJob  Action = "cancel_job"
	ActBreakGlass Action = "break_glass"
	// ActSupportShell opens a support session (a shell in the install's
	// account under the caller's live break-glass grant), handing the
	// terminal over until it ends.
	ActSupportShell Action = "support_shell"
	ActDescribe     Action = "describe"
	ActYAML         Action = "yaml"
	ActJSON         Action = "json"
	ActCopyID       Action = "copy_id"
	ActSaveLog      Action = "save_log"
	// The release view's: pause, resume and cancel the release.
	ActPauseRelease  Action = "pause_release"
	ActResumeRelease Action = "resume_release"
	ActCancelRelease Action = "cancel_release"
)

// binding is one action's keys and help.
type binding struct {
	act       Action
	scope     string // where it applies, for the help screen
	desc      string
	dangerous bool
	key.Binding
	short key.Binding // the same keys with the footer's short help
}

// shortHelp is the footer's word for the actions it lists.
var shortHelp = map[Action]string{
	ActHelp: "help", ActFilter: "filter", ActCommand: "cmd", ActOpen: "open", ActBack: "back",
	ActSort: "sort", ActRunAction: "action", ActBreakGlass: "break-glass", ActSupportShell: "shell", ActCancelJob: "cancel", ActFollow: "follow",
	ActWrap: "wrap", ActTimestamps: "time", ActNextMatch: "next", ActLogLevel: "level",
	ActDescribe: "describe", ActYAML: "yaml", ActJSON: "json", ActCopyID: "copy id", ActSaveLog: "save",
	ActPauseRelease: "pause", ActResumeRelease: "resume", ActCancelRelease: "cancel",
}

// keyDefaults lists every action in help order with its default keys.
var keyDefaults = []struct {
	act       Action
	scope     string
	keys      []string
	desc      string
	dangerous bool
}{
	{ActHelp, "global", []string{"?"}, "show or hide this help", false},
	{ActCommand, "global", []string{":"}, "command line (" + rootViewNames(" ") + " :ctx [NAME] :q)", false},
	{ActFilter, "global", []string{"/"}, "filter rows (text, or key=value on labels); search in logs", false},
	{ActBack, "global", []string{"esc"}, "back one level / clear filter", false},
	{ActOpen, "global", []string{"enter"}, "drill down into the selected row", false},
	{ActQuit, "global", []string{"ctrl+c", "q"}, "quit (q only on the top view)", false},
	{ActUp, "lists", []string{"up", "k"}, "move up", false},
	{ActDown, "lists", []string{"down", "j"}, "move down", false},
	{ActPageUp, "lists", []string{"pgup", "ctrl+b"}, "page up", false},
	{ActPageDown, "lists", []string{"pgdown", "ctrl+f", "space"}, "page down", false},
	{ActTop, "lists", []string{"home", "g"}, "jump to the start", false},
	{ActBottom, "lists", []string{"end", "G"}, "jump to the end", false},
	{ActDescribe, "lists", []string{"d"}, "describe the row under the cursor (every field, one per line)", false},
	{ActYAML, "lists", []string{"y"}, "the row under the cursor as YAML, as imsd returns it", false},
	{ActJSON, "lists", []string{"J"}, "the row under the cursor as JSON, as imsd returns it", false},
	{ActCopyID, "lists", []string{"c"}, "copy the row's id to the clipboard (OSC 52)", false},
	{ActSort, "fleet", []string{"s"}, "sort by the next column", false},
	{ActReverse, "fleet", []string{"S"}, "reverse the sort order", false},
	{ActFollow, "logs", []string{"f"}, "follow / pause", false},
	{ActNextMatch, "logs", []string{"n"}, "next search match", false},
	{ActPrevMatch, "logs", []string{"N"}, "previous search match", false},
	{ActWrap, "logs", []string{"w"}, "wrap long lines on/off", false},
	{ActTimestamps, "logs", []string{"t"}, "timestamps on/off", false},
	{ActLogLevel, "logs", []string{"L"}, "show only lines at a level or above, in turn: debug, info, warn, error, all (a plugin's leveled lines; others count as info)", false},
	{ActSaveLog, "logs", []string{"ctrl+s"}, "save the log held so far to JOB-ATTEMPT.log ($BYOC_LOG_DIR, or .)", false},
	{ActRunAction, "fleet, install", []string{"a"}, "run an action on the install (asks first)", true},
	{ActBreakGlass, "install", []string{"b"}, "request break-glass on the install (role, reason, duration)", true},
	{ActSupportShell, "install", []string{"e"}, "open a support shell in the install under your live break-glass grant (asks first)", true},
	{ActCancelJob, "install, jobs, logs", []string{"x"}, "cancel the job (asks first)", true},
	{ActPauseRelease, "release", []string{"p"}, "pause the release (asks first)", true},
	{ActResumeRelease, "release", []string{"r"}, "resume the paused or halted release (asks first)", true},
	{ActCancelRelease, "release", []string{"X"}, "cancel the release (asks first)", true},
}

// KeyMap is the console's key bindings.
type KeyMap struct {
	list []binding
	by   map[Action]*binding
}

// NewKeyMap returns the bindings: the defaults, changed by overrides (action
// name → keys). In read-only mode dangerous actions get no keys at all. An
// unknown action name or a key bound twice is an error naming it.
func NewKeyMap(overrides map[string][]string, readOnly bool) (*KeyMap, error) {
	return newKeyMap(overrides, func(Action) bool { return readOnly })
}

// newKeyMap is NewKeyMap with the dangerous actions for which unbind
// says true left without keys (read-only mode, or roles that allow them
// nowhere).
func newKeyMap(overrides map[string][]string, unbind func(Action) bool) (*KeyMap, error) {
	km := &KeyMap{by: map[Action]*binding{}}
	known := map[Action]bool{}
	for _, d := range keyDefaults {
		known[d.act] = true
	}
	for name := range overrides {
		if !known[Action(name)] {
			return nil, fmt.Errorf("keys.%s: unknown action; known actions: %s", name, strings.Join(actionNames(), ", "))
		}
	}
	owner := map[string]Action{}
	for _, d := range keyDefaults {
		keys := d.keys
		if o, ok := overrides[string(d.act)]; ok {
			keys = o
		}
		if d.dangerous && unbind(d.act) {
			keys = nil
		}
		for _, k := range keys {
			if k == "" {
				return nil, fmt.Errorf("keys.%s: empty key name", d.act)
			}
			if prev, ok := owner[k]; ok && scopesOverlap(km.by[prev].scope, d.scope) {
				return nil, fmt.Errorf("keys.%s: key %q is already bound to %s (both work in %s): bind one of them to another key", d.act, k, prev, sharedScope(km.by[prev].scope, d.scope))
			}
			owner[k] = d.act
		}
		b := binding{act: d.act, scope: d.scope, desc: d.desc, dangerous: d.dangerous,
			Binding: key.NewBinding(key.WithKeys(keys...), key.WithHelp(strings.Join(keys, "/"), d.desc))}
		b.short = key.NewBinding(key.WithKeys(keys...), key.WithHelp(strings.Join(keys, "/"), shortHelp[d.act]))
		if len(keys) == 0 {
			b.Unbind()
			b.short.Unbind()
		}
		km.list = append(km.list, b)
		km.by[d.act] = &km.list[len(km.list)-1]
	}
	return km, nil
}

// scopesOverlap reports whether two scopes can see the same key press:
// global and list keys work in every view, others only in their own.
func scopesOverlap(a, b string) bool {
	if a == "global" || b == "global" || a == "lists" || b == "lists" {
		return true
	}
	for _, x := range strings.Split(a, ", ") {
		for _, y := range strings.Split(b, ", ") {
			if x == y {
				return true
			}
		}
	}
	return false
}

// sharedScope names where two overlapping scopes meet, for an error.
func sharedScope(a, b string) string {
	switch {
	case a == "global" || b == "global":
		return "every view"
	case a == "lists" || b == "lists":
		return "every list"
	}
	var out []string
	for _, x := range strings.Split(a, ", ") {
		for _, y := range strings.Split(b, ", ") {
			if x == y {
				out = append(out, "the "+x+" view")
			}
		}
	}
	return strings.Join(out, " and ")
}

func actionNames() []string {
	var out []string
	for _, d := range keyDefaults {
		out = append(out, string(d.act))
	}
	sort.Strings(out)
	return out
}

// Is reports whether msg is one of act's keys. An unbound action matches nothing.
func (km *KeyMap) Is(msg fmt.Stringer, act Action) bool {
	b := km.by[act]
	return b != nil && b.Enabled() && key.Matches(msg, b.Binding)
}

// Bound reports whether act has any key.
func (km *KeyMap) Bound(act Action) bool {
	b := km.by[act]
	return b != nil && b.Enabled()
}

// Keys returns act's keys joined for display, such as "up/k".
func (km *KeyMap) Keys(act Action) string {
	if b := km.by[act]; b != nil && b.Enabled() {
		return b.Help().Key
	}
	return ""
}

// ShortHelp returns the bindings of acts with the footer's short help, for
// bubbles' help; an unbound action's binding is disabled, so help leaves it out.
func (km *KeyMap) ShortHelp(acts []Action) []key.Binding {
	out := make([]key.Binding, 0, len(acts))
	for _, a := range acts {
		if b := km.by[a]; b != nil {
			out = append(out, b.short)
		}
	}
	return out
}

// HelpLines returns the help screen's lines: every bound action with its
// keys, grouped by where it applies, generated from the live bindings.
func (km *KeyMap) HelpLines() []string {
	var out []string
	scope := ""
	for _, b := range km.list {
		if !b.Enabled() {
			continue
		}
		if b.scope != scope {
			if scope != "" {
				out = append(out, "")
			}
			scope = b.scope
			out = append(out, strings.ToUpper(scope))
		}
		out = append(out, fmt.Sprintf("  %-18s %s", b.Help().Key, b.desc))
	}
	return out
}
