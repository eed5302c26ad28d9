package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/byoc-dev/byoc/internal/auditchain"
	"github.com/byoc-dev/byoc/internal/plural"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

func (a *app) auditCommand() *cobra.Command {
	return group("audit", "List, verify and export the hash-chained audit events",
		a.auditListCommand(),
		a.auditVerifyCommand(),
		a.auditExportCommand(),
	)
}

// auditScope is the chain flags every audit command takes.
type auditScope struct {
	install string
	vendor  bool
	// selector picks the chains of the installs it matches (audit list's
	// -l).
	selector string
}

func (s *auditScope) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&s.install, "install", "", "only this install's chain (name or id)")
	cmd.Flags().BoolVar(&s.vendor, "vendor", false, "only the vendor-wide chain (tokens, apps, pushes, calls naming no install)")
}

func (s *auditScope) check() error {
	if s.install != "" && s.vendor {
		return usagef("give --install or --vendor, not both")
	}
	if s.selector != "" && (s.install != "" || s.vendor) {
		return usagef("-l selects installs' chains: give it without --install or --vendor")
	}
	return nil
}

// fetchAudit reads every event of the scope since since (zero: all),
// page by page.
func (a *app) fetchAudit(cmd *cobra.Command, s auditScope, since time.Time) ([]auditchain.Record, error) {
	c, err := a.connect()
	if err != nil {
		return nil, err
	}
	req := &imsv1.ListAuditEventsRequest{Install: s.install, Vendor: s.vendor, Selector: s.selector}
	if !since.IsZero() {
		req.SinceUnixNano = since.UnixNano()
	}
	var out []auditchain.Record
	for {
		res, err := c.ListAuditEvents(cmd.Context(), connect.NewRequest(req))
		if err != nil {
			return nil, withFlags(c.wrap(err), fieldFlag{"selector", "--selector"})
		}
		for _, e := range res.Msg.GetEvents() {
			out = append(out, auditchain.Record{Chain: e.GetChain(), Seq: e.GetSeq(), At: e.GetAtUnixNano(), Kind: e.GetKind(),
				Actor: e.GetActor(), Subject: e.GetSubject(), Data: e.GetData(), Prev: e.GetPrev(), Hash: e.GetHash()})
		}
		if res.Msg.GetNextPageToken() == "" {
			return out, nil
		}
		req.PageToken = res.Msg.GetNextPageToken()
	}
}

// parseSince reads --since: a duration back from now ("1h") or a time
// (RFC 3339).
func parseSince(now time.Time, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	return time.Time{}, usagef("--since %q: want a duration back from now (90m, 24h) or a time (2030-01-02T15:04:05Z)", v)
}

func chainName(c string) string {
	if c == "" {
		return "vendor"
	}
	return c
}

func (a *app) auditListCommand() *cobra.Command {
	var scope auditScope
	var since string
	var watch bool
	cmd := &cobra.Command{
		Use:   "list [--install INSTALL | --vendor | -l SELECTOR] [--since T] [--watch]",
		Short: "List audit events, by chain then sequence number",
		Long: `List audit events: every install's chain and the vendor-wide one, or only
--install's or --vendor's, or the chains of the installs -l selects. With
-o json, each event as byoc audit export writes it (the fields the hash
covers, and the hash).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := scope.check(); err != nil {
				return err
			}
			t0, err := parseSince(a.now(), since)
			if err != nil {
				return err
			}
			if watch {
				return a.watchAudit(cmd, scope, t0)
			}
			rs, err := a.fetchAudit(cmd, scope, t0)
			if err != nil {
				return err
			}
			if a.jsonOutput() {
				if rs == nil {
					rs = []auditchain.Record{}
				}
				return writeJSONValue(a.stdout, rs)
			}
			installs := a.chainNames()
			t := newTable(a.stdout, a.auditHeader()...)
			for _, r := range rs {
				t.row(a.auditRow(cmd.Context(), installs, r)...)
			}
			return t.flush()
		},
	}
	scope.flags(cmd)
	selectorFlag(cmd, &scope.selector, "the chains of installs")
	cmd.Flags().StringVar(&since, "since", "", "only events at or after this time (RFC 3339) or this long ago (24h)")
	watchFlag(cmd, &watch, "each new event as it is recorded")
	return cmd
}

// auditHeader is the header of audit list's table: CHAIN names the
// install (its id under -o wide), or says vendor.
func (a *app) auditHeader() []string {
	h := []string{"TIME", "CHAIN", "SEQ", "KIND", "ACTOR", "SUBJECT", "DATA"}
	if a.wideOutput() {
		h = slices.Insert(h, 2, "CHAIN ID")
	}
	return h
}

// chainNames looks up the names of the installs audit chains are about.
func (a *app) chainNames() *names {
	return &names{list: func(ctx context.Context) map[string]string {
		c, err := a.connect()
		if err != nil {
			return map[string]string{}
		}
		return a.installNames(ctx, c)
	}}
}

func (a *app) auditRow(ctx context.Context, installs *names, r auditchain.Record) []string {
	name := "vendor"
	if r.Chain != "" {
		name = installs.of(ctx, r.Chain)
	}
	row := []string{time.Unix(0, r.At).UTC().Format(time.RFC3339), name, strconv.FormatInt(r.Seq, 10), r.Kind, r.Actor, r.Subject, r.Data}
	if a.wideOutput() {
		row = slices.Insert(row, 2, r.Chain)
	}
	return row
}

// auditOverlap is how far back each poll of audit list --watch asks again
// (and drops what it printed): an event recorded a little late, with a
// time before the newest one seen (another replica's clock), still shows.
const auditOverlap = time.Minute

// watchAudit prints the events since since, then each new one as imsd
// records it (events are never changed, only appended), polling until
// Ctrl-C.
func (a *app) watchAudit(cmd *cobra.Command, scope auditScope, since time.Time) error {
	printed := map[string]int64{} // chain/seq → its time, for those within auditOverlap of the newest
	installs := a.chainNames()
	t := &watchTable{w: a.stdout}
	return poll(cmd.Context(), func(first bool) (bool, error) {
		rs, err := a.fetchAudit(cmd, scope, since)
		if err != nil {
			return false, err
		}
		var rows [][]string
		fresh := 0
		newest := since.UnixNano()
		for _, r := range rs {
			newest = max(newest, r.At)
			key := r.Chain + "/" + strconv.FormatInt(r.Seq, 10)
			if _, ok := printed[key]; ok {
				continue
			}
			printed[key] = r.At
			fresh++
			if a.jsonOutput() {
				if err := writeJSONValue(a.stdout, r); err != nil {
					return false, err
				}
				continue
			}
			if len(t.widths) == 0 && len(rows) == 0 {
				rows = append(rows, a.auditHeader())
			}
			rows = append(rows, a.auditRow(cmd.Context(), installs, r))
		}
		if len(rows) > 0 {
			if err := t.print(rows...); err != nil {
				return false, err
			}
		}
		if first && len(printed) == 0 {
			fmt.Fprintln(a.stderr, "No audit events yet; watching for new ones (Ctrl-C ends).")
		}
		if newest > 0 {
			since = time.Unix(0, newest).Add(-auditOverlap)
		}
		for k, at := range printed {
			if at < since.UnixNano() {
				delete(printed, k)
			}
		}
		return fresh > 0, nil
	})
}

func (a *app) auditVerifyCommand() *cobra.Command {
	var scope auditScope
	var file string
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Recompute the audit chains and name the first record changed, removed or inserted",
		Long: `Read every audit chain from imsd (or one: --install, --vendor), recompute
each record's hash and its link to the record before it, and name the first
record that was changed, removed or inserted. With --file, check an export
(byoc audit export) instead, without imsd. Exits 1 when a chain does not
verify.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := scope.check(); err != nil {
				return err
			}
			var rs []auditchain.Record
			var err error
			if file != "" {
				rs, err = readExport(a.stdin, file)
			} else {
				rs, err = a.fetchAudit(cmd, scope, time.Time{})
			}
			if err != nil {
				return err
			}
			var installs *names // an export is checked without imsd: ids only
			if file == "" {
				installs = a.chainNames()
			}
			bad := 0
			for _, chain := range splitChains(rs) {
				name := chainName(chain[0].Chain)
				if id := chain[0].Chain; installs != nil && id != "" {
					if n := installs.of(cmd.Context(), id); n != id {
						name = n + " (" + id + ")"
					}
				}
				if p := auditchain.Verify(chain); p != nil {
					bad++
					fmt.Fprintf(a.stdout, "chain %s: NOT VERIFIED: record %d %s (%s)\n", name, p.Seq, p.What, p.Detail)
					continue
				}
				last := chain[len(chain)-1]
				fmt.Fprintf(a.stdout, "chain %s: %s verified, last %d hash %s\n", name, plural.Count(len(chain), "record"), last.Seq, last.Hash)
			}
			if len(rs) == 0 {
				fmt.Fprintln(a.stdout, "no audit events")
			}
			if bad > 0 {
				return &exitCodeError{code: exitError, msg: fmt.Sprintf("%d audit chain(s) do not verify", bad)}
			}
			return nil
		},
	}
	scope.flags(cmd)
	cmd.Flags().StringVar(&file, "file", "", "verify this export (JSON Lines; - for stdin) instead of imsd's chains")
	return cmd
}

// splitChains cuts records sorted by chain into one slice per chain.
func splitChains(rs []auditchain.Record) [][]auditchain.Record {
	var out [][]auditchain.Record
	for i := 0; i < len(rs); {
		j := i
		for j < len(rs) && rs[j].Chain == rs[i].Chain {
			j++
		}
		out = append(out, rs[i:j])
		i = j
	}
	return out
}

// readExport reads an export's JSON Lines.
func readExport(stdin io.Reader, name string) ([]auditchain.Record, error) {
	r := stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	var out []auditchain.Record
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var rec auditchain.Record
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			return nil, fmt.Errorf("%s:%d: not an audit record: %w", name, n, err)
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return out, nil
}

func (a *app) auditExportCommand() *cobra.Command {
	var scope auditScope
	var file string
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Write an audit chain as JSON Lines that verify offline",
		Long: `Write one install's audit chain (--install) or the vendor-wide one (--vendor)
as JSON Lines, one record per line, oldest first: chain, seq, at (Unix
nanoseconds), kind, actor, subject, data, prev and hash. Anyone can check
it without imsd: byoc audit verify --file, or a few lines of any language
(docs/operator/audit.md).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := scope.check(); err != nil {
				return err
			}
			if scope.install == "" && !scope.vendor {
				return usagef("byoc audit export needs --install I or --vendor")
			}
			rs, err := a.fetchAudit(cmd, scope, time.Time{})
			if err != nil {
				return err
			}
			w := a.stdout
			if file != "" && file != "-" {
				f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
				if err != nil {
					return err
				}
				defer f.Close()
				w = f
			}
			bw := bufio.NewWriter(w)
			enc := json.NewEncoder(bw)
			enc.SetEscapeHTML(false)
			for _, r := range rs {
				if err := enc.Encode(r); err != nil {
					return err
				}
			}
			if err := bw.Flush(); err != nil {
				return err
			}
			if f, ok := w.(*os.File); ok && w != a.stdout {
				if err := f.Close(); err != nil {
					return fmt.Errorf("write %s: %w", file, err)
				}
				fmt.Fprintf(a.stderr, "Wrote %s to %s.\n", plural.Count(len(rs), "record"), file)
			}
			return nil
		},
	}
	scope.flags(cmd)
	cmd.Flags().StringVarP(&file, "file", "f", "", "write to this file instead of stdout")
	return cmd
}
