package console

import (
	"context"
	"fmt"
	"strings"

	tea "charm.land/bubbletea/v2"

	"github.com/byoc-dev/byoc/tui/termtext"
)

// tableView is a list of one kind of object that imsd returns in one
// call (:workflows, :apps, :breakglass, :ctx and what they open): loaded
// by a tea.Cmd under a generation, shown as a table whose columns size
// to the window, filtered by words, each row described, shown as YAML or
// JSON and its id copied as in every list. A row's cells are made when
// the answer comes (Update), never in View.
type tableView[T any] struct {
	*env
	list
	w, h   int
	spec   tableSpec[T]
	rows   []T
	cells  []map[string]string // rows' cells, made when they come
	shown  []int               // rows matching filter
	filter string
	gen    int
	loaded bool
	err    error
	ctx    context.Context
	cancel context.CancelFunc
}

// tableSpec is what differs between table views.
type tableSpec[T any] struct {
	title string
	cols  []column
	// load lists the rows; it returns the command that asks imsd.
	load func(ctx context.Context, e *env) func() ([]T, error)
	// cells are a row's cells by column name, plain text.
	cells func(e *env, r T) map[string]string
	// sel is the row as an object (for d, y, J and c).
	sel func(e *env, r T) selection
	// open is what enter on a row does (ctx ends when the view closes);
	// nil describes it.
	open func(ctx context.Context, e *env, r T) tea.Cmd
	// other handles the answers to what open asked for.
	other func(e *env, msg tea.Msg) tea.Cmd
	// refresh lists again when the fleet changes (workflows, grants).
	refresh bool
	// empty is what an empty list says.
	empty string
}

// tableMsg is a table's listing.
type tableMsg[T any] struct {
	gen  int
	rows []T
	err  error
}

func newTableView[T any](e *env, spec tableSpec[T]) *tableView[T] {
	ctx, cancel := context.WithCancel(e.ctx)
	return &tableView[T]{env: e, spec: spec, ctx: ctx, cancel: cancel}
}

func (v *tableView[T]) Init() tea.Cmd { return v.load() }
func (v *tableView[T]) Close()        { v.cancel() }

func (v *tableView[T]) load() tea.Cmd {
	v.gen = v.nextGen()
	gen, f := v.gen, v.spec.load(v.ctx, v.env)
	return func() tea.Msg {
		rows, err := f()
		return tableMsg[T]{gen: gen, rows: rows, err: err}
	}
}

func (v *tableView[T]) Title() string {
	t := v.spec.title
	if v.filter != "" {
		t += fmt.Sprintf(" (/%s: %d of %d)", v.filter, len(v.shown), len(v.rows))
	}
	return t
}

func (v *tableView[T]) SetSize(w, h int) { v.w, v.h = w, h; v.scroll() }
func (v *tableView[T]) Filter() string   { return v.filter }
func (v *tableView[T]) SetFilter(s string) {
	v.filter = s
	v.refilter()
	v.scroll()
}

// page is the rows under the header line.
func (v *tableView[T]) page() int { return max(1, v.h-1) }
func (v *tableView[T]) scroll()   { v.list.scroll(len(v.shown), v.page()) }
func (v *tableView[T]) current() (T, bool) {
	var zero T
	if v.pos >= 0 && v.pos < len(v.shown) {
		return v.rows[v.shown[v.pos]], true
	}
	return zero, false
}

// refilter keeps the rows whose cells hold every word of the filter.
func (v *tableView[T]) refilter() {
	v.shown = v.shown[:0]
	words := strings.Fields(strings.ToLower(v.filter))
	for i, c := range v.cells {
		all := strings.ToLower(strings.Join(mapValues(c), " "))
		ok := true
		for _, w := range words {
			if !strings.Contains(all, w) {
				ok = false
				break
			}
		}
		if ok {
			v.shown = append(v.shown, i)
		}
	}
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func (v *tableView[T]) Selected() selection {
	if r, ok := v.current(); ok {
		return v.spec.sel(v.env, r)
	}
	return selection{}
}

func (v *tableView[T]) Update(msg tea.Msg) tea.Cmd {
	defer v.scroll()
	switch msg := msg.(type) {
	case tableMsg[T]:
		if msg.gen != v.gen {
			return nil
		}
		v.loaded, v.err = true, msg.err
		if msg.err == nil {
			v.rows = msg.rows
			v.cells = make([]map[string]string, len(v.rows))
			for i, r := range v.rows {
				c := v.spec.cells(v.env, r)
				for k, s := range c {
					c[k] = termtext.Clean(s, " ")
				}
				v.cells[i] = c
			}
			v.refilter()
		}
	case fleetChangedMsg:
		if v.spec.refresh && len(msg.resps) > 0 {
			return v.load()
		}
	default:
		if v.spec.other != nil {
			return v.spec.other(v.env, msg)
		}
	case tea.KeyPressMsg:
		if v.move(v.km, msg, len(v.shown), v.page()) {
			return nil
		}
		if v.km.Is(msg, ActOpen) {
			r, ok := v.current()
			switch {
			case !ok:
			case v.spec.open != nil:
				return v.spec.open(v.ctx, v.env, r)
			default:
				if s := v.spec.sel(v.env, r); s.obj != nil {
					return v.nav.push(newObjectView(v.env, s, fmtDescribe))
				}
			}
		}
	}
	return nil
}

func (v *tableView[T]) View() string {
	st := v.st
	switch {
	case !v.loaded:
		return st.muted.Render("loading " + v.spec.title + "…")
	case v.err != nil:
		return st.bad.Render(v.spec.title + " not listed: " + errText(v.err))
	case len(v.rows) == 0:
		return st.muted.Render(v.spec.empty)
	case len(v.shown) == 0:
		return st.muted.Render(fmt.Sprintf("none of the %d held matches the filter %q (esc clears it)", len(v.rows), v.filter))
	}
	first, last, pos := v.window(len(v.shown), v.page())
	need, head := map[string]int{}, map[string]string{}
	for _, c := range v.spec.cols {
		head[c.name] = c.name
	}
	for i := first; i < last; i++ {
		widest(need, v.cells[v.shown[i]])
	}
	cols := layoutFit(v.spec.cols, v.w, 16, 200, need)
	out := []string{st.muted.Render(row(cols, head))}
	for i := first; i < last; i++ {
		line := row(cols, v.cells[v.shown[i]])
		if i == pos {
			line = v.selectedLine(line, v.w)
		}
		out = append(out, line)
	}
	return lines(out)
}
