package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// --watch (-w) on the list commands, as kubectl's: the list, then each row
// again whenever it changes, until Ctrl-C, which ends the watch with exit
// 0 (watching has no result to lose). In a table the later rows keep the
// columns of the first; under -o json, yaml, name, ... each object is
// printed on its own, one document after another. Installs come from
// imsd's WatchInstalls stream (what the console uses); the other lists
// (runList) have no stream and are polled: every watchPollMin while
// something changes, backing off to watchPollMax while nothing does.

var (
	watchPollMin = time.Second
	watchPollMax = 10 * time.Second
)

// watchTable prints rows whose columns stay aligned across flushes: a
// column is as wide as the widest cell printed in it so far.
type watchTable struct {
	w      io.Writer
	widths []int
}

func (t *watchTable) print(rows ...[]string) error {
	for _, r := range rows {
		for i, c := range r {
			if c == "" {
				c = "-"
			}
			r[i] = strings.NewReplacer("\t", " ", "\n", " ").Replace(c)
			if i >= len(t.widths) {
				t.widths = append(t.widths, 0)
			}
			t.widths[i] = max(t.widths[i], len([]rune(r[i])))
		}
	}
	var b strings.Builder
	for _, r := range rows {
		for i, c := range r {
			b.WriteString(c)
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", t.widths[i]-len([]rune(c))+3))
			}
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(t.w, b.String())
	return err
}

// listing is what a list command shows: how to fetch its rows and how to
// print them in a table. runList prints it once, or with --watch, then
// each row again as it changes.
type listing[T proto.Message] struct {
	// noun names the rows in the plural ("jobs"), for "No jobs yet;
	// watching for new ones".
	noun string
	// empty is what an empty list says, without --watch ("No jobs."); ""
	// prints the header alone.
	empty  string
	fetch  func(ctx context.Context) ([]T, error)
	id     func(T) string
	header []string
	// row is m's row; ctx is for looking up names (an install's, an
	// app's) the row shows.
	row func(ctx context.Context, now time.Time, m T) []string
	// get, if set, reads one row by id: a watched row that leaves the list
	// (a workflow that ended under --active, a job that left --state) is
	// read again and printed as it is now, if it changed; one that is not
	// found any more is printed as gone says, else "removed". Rows that
	// leave under --limit as newer ones come are read too, and not printed
	// again, being unchanged.
	get func(ctx context.Context, id string) (T, error)
	// gone, if set, is what the STATE column (or goneColumn) says of a
	// watched row that leaves the list and get cannot read: "revoked" for
	// a token (only unrevoked ones are listed). Unset, and get unset, such
	// a row is not printed again.
	gone, goneColumn string
}

// runList prints l: all its rows, or with watch, then each new or changed
// row (compared by its -o json object, so a CREATED "3s ago" that ages is
// no change), polling until ctx ends.
func runList[T proto.Message](ctx context.Context, a *app, watch bool, l listing[T]) error {
	if !watch {
		rows, err := l.fetch(ctx)
		if err != nil {
			return err
		}
		if err := sortRows(a, rows); err != nil {
			return err
		}
		if a.jsonOutput() {
			return writeJSONList(a.stdout, rows)
		}
		if len(rows) == 0 && l.empty != "" {
			fmt.Fprintln(a.stderr, l.empty)
			return nil
		}
		now := a.now()
		t := newTable(a.stdout, l.header...)
		for _, m := range rows {
			t.row(l.row(ctx, now, m)...)
		}
		return t.flush()
	}
	seen := map[string]string{} // row id → its JSON when last printed
	last := map[string]T{}      // row id → the row last fetched
	t := &watchTable{w: a.stdout}
	return poll(ctx, func(first bool) (bool, error) {
		rows, err := l.fetch(ctx)
		if err != nil {
			return false, err
		}
		var changed, gone []T
		in := map[string]bool{}
		for _, m := range rows {
			b, err := marshalJSON(m)
			if err != nil {
				return false, err
			}
			id := l.id(m)
			in[id], last[id] = true, m
			if seen[id] != string(b) {
				seen[id] = string(b)
				changed = append(changed, m)
			}
		}
		for id, m := range last {
			if in[id] {
				continue
			}
			before := seen[id]
			delete(seen, id)
			delete(last, id)
			if l.get == nil {
				if l.gone != "" {
					gone = append(gone, m)
				}
				continue
			}
			switch now, err := l.get(ctx, id); {
			case err == nil:
				if b, err := marshalJSON(now); err != nil || string(b) != before {
					changed = append(changed, now)
				}
			case connect.CodeOf(err) == connect.CodeNotFound:
				gone = append(gone, m)
			case ctx.Err() != nil:
				return false, nil
			default:
				return false, err
			}
		}
		if err := sortRows(a, changed); err != nil {
			return false, err
		}
		slices.SortFunc(gone, func(x, y T) int { return strings.Compare(l.id(x), l.id(y)) })
		switch {
		case a.jsonOutput():
			// As kubectl get -w -o json: a row that left the list is
			// printed once more, as it was last seen.
			for _, m := range append(changed, gone...) {
				if err := writeJSON(a.stdout, m); err != nil {
					return false, err
				}
			}
		case first && len(changed) == 0:
			fmt.Fprintf(a.stderr, "No %s yet; watching for new ones (Ctrl-C ends).\n", l.noun)
		case len(changed)+len(gone) > 0:
			var out [][]string
			if len(t.widths) == 0 {
				out = append(out, l.header)
			}
			now := a.now()
			for _, m := range changed {
				out = append(out, l.row(ctx, now, m))
			}
			for _, m := range gone {
				row := l.row(ctx, now, m)
				if i := slices.Index(l.header, cmp.Or(l.goneColumn, "STATE")); i >= 0 {
					row[i] = cmp.Or(l.gone, "removed")
				}
				out = append(out, row)
			}
			if err := t.print(out...); err != nil {
				return false, err
			}
		}
		return len(changed)+len(gone) > 0, nil
	})
}

// poll calls check until ctx ends (exit 0: Ctrl-C ends a watch) or it
// fails: again after watchPollMin when it saw a change, backing off to
// watchPollMax while it sees none.
func poll(ctx context.Context, check func(first bool) (changed bool, err error)) error {
	delay := watchPollMin
	for first := true; ; first = false {
		changed, err := check(first)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		if changed {
			delay = watchPollMin
		} else {
			delay = min(2*delay, watchPollMax)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
	}
}

// watchFlag gives a list command its --watch (-w); what says what is
// printed again: "each job again as it changes (new jobs too)".
func watchFlag(cmd *cobra.Command, watch *bool, what string) {
	cmd.Flags().BoolVarP(watch, "watch", "w", false, "after the list, print "+what+" until Ctrl-C")
}

// names looks names up by id through list, again only when an id is new:
// the install or app names a table shows in place of ids.
type names struct {
	list func(ctx context.Context) map[string]string
	m    map[string]string
}

// of is id's name, or id when there is none.
func (n *names) of(ctx context.Context, id string) string {
	if _, ok := n.m[id]; !ok && id != "" {
		n.m = n.list(ctx)
		if _, ok := n.m[id]; !ok {
			n.m[id] = "" // an install deleted since: no second look-up
		}
	}
	return cmp.Or(n.m[id], id)
}

// watchInstalls prints the installs (of appName, if set) as WatchInstalls
// sends them: all at first, then each as it changes.
func (a *app) watchInstalls(ctx context.Context, c *client, appName, selector string) error {
	stream, err := c.WatchInstalls(ctx, connect.NewRequest(&imsv1.WatchInstallsRequest{App: appName, Selector: selector}))
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return withFlags(c.wrap(err), fieldFlag{"selector", "--selector"})
	}
	defer stream.Close()
	t := &watchTable{w: a.stdout}
	var appNames map[string]string
	last := map[string]string{}          // install id → what was last printed of it
	known := map[string]*imsv1.Install{} // install id → the install
	for stream.Receive() {
		msg := stream.Msg()
		var changed []*imsv1.Install
		for _, st := range msg.GetInstalls() {
			if ins := st.GetInstall(); ins != nil {
				changed = append(changed, ins)
			}
		}
		if err := sortRows(a, changed); err != nil {
			return err
		}
		var rows [][]string
		for _, ins := range changed {
			known[ins.GetId()] = ins
			if a.jsonOutput() {
				b, err := marshalJSON(ins)
				if err != nil {
					return err
				}
				if last[ins.GetId()] == string(b) {
					continue
				}
				last[ins.GetId()] = string(b)
				if err := writeJSON(a.stdout, ins); err != nil {
					return err
				}
				continue
			}
			if _, ok := appNames[ins.GetAppId()]; !ok {
				appNames = a.appNames(ctx, c)
			}
			row := a.installRow(ins, appNames, a.now())
			if text := strings.Join(row, "\t"); last[ins.GetId()] != text {
				last[ins.GetId()] = text
				rows = append(rows, row)
			}
		}
		removed := msg.GetRemovedInstallIds()
		if msg.GetSnapshot() {
			// A new snapshot (imsd resent it) replaces what came before:
			// an install missing from it is gone.
			in := map[string]bool{}
			for _, ins := range changed {
				in[ins.GetId()] = true
			}
			for id := range known {
				if !in[id] {
					removed = append(removed, id)
				}
			}
			slices.Sort(removed)
		}
		if !a.jsonOutput() {
			for _, id := range removed {
				if ins := known[id]; ins != nil {
					row := a.installRow(ins, appNames, a.now())
					row[slices.Index(a.installHeader(), "STATE")] = "removed"
					rows = append(rows, row)
					delete(known, id)
					delete(last, id)
				}
			}
			if len(rows) > 0 && len(t.widths) == 0 {
				rows = append([][]string{a.installHeader()}, rows...)
			}
			if len(rows) > 0 {
				if err := t.print(rows...); err != nil {
					return err
				}
			} else if msg.GetSnapshot() && len(known) == 0 {
				fmt.Fprintln(a.stderr, "No installs yet; watching for new ones (Ctrl-C ends).")
			}
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := stream.Err(); err != nil {
		return c.wrap(err)
	}
	return nil
}
