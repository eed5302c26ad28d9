package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// --watch (-w) on job list and install list, as kubectl's: the list, then
// each row again whenever it changes, until Ctrl-C, which ends the watch
// with exit 0 (watching has no result to lose). In a table the later rows
// keep the columns of the first; under -o json, yaml, name, ... each
// object is printed on its own, one document after another. Installs come
// from imsd's WatchInstalls stream (what the console uses); jobs have no
// stream, so the list is polled: every watchPollMin while something
// changes, backing off to watchPollMax while nothing does.

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

// watchJobs prints the jobs fetch returns, then each new or changed one,
// polling until ctx ends.
func (a *app) watchJobs(ctx context.Context, c *client, fetch func(context.Context) ([]*imsv1.Job, error)) error {
	seen := map[string]string{} // job id → its JSON when last printed
	t := &watchTable{w: a.stdout}
	var installNames map[string]string
	delay := watchPollMin
	for first := true; ; first = false {
		jobs, err := fetch(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		var changed []*imsv1.Job
		for _, j := range jobs {
			b, err := marshalJSON(j)
			if err != nil {
				return err
			}
			if seen[j.GetId()] != string(b) {
				seen[j.GetId()] = string(b)
				changed = append(changed, j)
			}
		}
		if err := sortRows(a, changed); err != nil {
			return err
		}
		switch {
		case a.jsonOutput():
			for _, j := range changed {
				if err := writeJSON(a.stdout, j); err != nil {
					return err
				}
			}
		case first && len(changed) == 0:
			fmt.Fprintln(a.stderr, "No jobs yet; watching for new ones (Ctrl-C ends).")
		case len(changed) > 0:
			rows := [][]string{}
			if len(t.widths) == 0 {
				rows = append(rows, a.jobHeader())
			}
			for _, j := range changed {
				if _, ok := installNames[j.GetInstallId()]; !ok {
					installNames = a.installNames(ctx, c) // a new install
				}
				rows = append(rows, a.jobRow(j, installNames, a.now()))
			}
			if err := t.print(rows...); err != nil {
				return err
			}
		}
		if len(changed) > 0 {
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
