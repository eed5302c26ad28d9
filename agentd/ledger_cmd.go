package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/agentd/ledger"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1/agentv1connect"
)

const egressUsage = `usage: agentd egress [--state-dir DIR] [--since WHEN] [--json] list|stats

The egress ledger: every message this agent sent to imsd (STATE/egress/
ledger.jsonl), each with its kind, size, the job it concerns and the
SHA-256 of its content (docs/customer/what-leaves-your-account.md).
Not the plugin sandbox's egress proxy (the --sandbox-egress-* flags).

  list    one line per message: time, kind, size in bytes, job, sha256
          (--json: the entries as JSON Lines, with any content kept)
  stats   messages and bytes per kind, and in total

flags:
  --state-dir DIR   the agent's state directory; also $BYOC_STATE_DIR
  --since WHEN      only messages sent since WHEN: a duration back from
                    now (1h, 30m) or a time (2026-01-02T15:04:05Z)
  --json            list: JSON Lines; stats: one JSON object

Exit status: 0 on success, 1 on an unreadable ledger, 2 on misuse.
`

// egressCmd runs `agentd egress`.
func egressCmd(args []string, stdout, stderr io.Writer, now func() time.Time) int {
	fs := flag.NewFlagSet("agentd egress", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), egressUsage) }
	stateDir := fs.String("state-dir", os.Getenv("BYOC_STATE_DIR"), "the agent's state `directory`; also $BYOC_STATE_DIR")
	sinceArg := fs.String("since", "", "only messages sent since `WHEN` (a duration or a time)")
	asJSON := fs.Bool("json", false, "JSON output")
	words, code := parseWords(fs, args, stdout)
	if words == nil {
		return code
	}
	if len(words) != 1 || (words[0] != "list" && words[0] != "stats") {
		fmt.Fprintf(stderr, "agentd egress: want list or stats, got %q\n\n%s", strings.Join(words, " "), egressUsage)
		return 2
	}
	var since time.Time
	if *sinceArg != "" {
		if d, err := time.ParseDuration(*sinceArg); err == nil && d >= 0 {
			since = now().Add(-d)
		} else if t, err := time.Parse(time.RFC3339, *sinceArg); err == nil {
			since = t
		} else {
			fmt.Fprintf(stderr, "agentd egress: --since %q: want a duration (1h, 30m) or an RFC 3339 time (2026-01-02T15:04:05Z)\n", *sinceArg)
			return 2
		}
	}
	dir, code := stateDirArg("agentd egress", *stateDir, stderr)
	if code != 0 {
		return code
	}
	es, err := ledger.Read(dir, since)
	if err != nil {
		fmt.Fprintf(stderr, "agentd egress: %v\n", err)
		return 1
	}
	if words[0] == "list" {
		if *asJSON {
			enc := json.NewEncoder(stdout)
			for _, e := range es {
				if err := enc.Encode(e); err != nil {
					return 1
				}
			}
			return 0
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TIME\tKIND\tSIZE\tJOB\tSHA256")
		for _, e := range es {
			job, sum := e.Job, e.SHA256
			if e.Kind == "dropped" {
				sum = fmt.Sprintf("(%d entries not recorded: the disk did not take them)", e.Count)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", e.Time.UTC().Format(time.RFC3339Nano), shown(e.Kind), e.Size, cmpOr(shown(job), "-"), sum)
		}
		tw.Flush()
		return 0
	}
	byKind, total := ledger.Stats(es)
	if *asJSON {
		type kindJSON struct {
			Kind     string `json:"kind"`
			Messages int    `json:"messages"`
			Bytes    int64  `json:"bytes"`
		}
		out := struct {
			Kinds []kindJSON `json:"kinds"`
			Total kindJSON   `json:"total"`
		}{Kinds: []kindJSON{}, Total: kindJSON{"total", total.Messages, total.Bytes}}
		for _, k := range byKind {
			out.Kinds = append(out.Kinds, kindJSON{k.Kind, k.Messages, k.Bytes})
		}
		b, _ := json.Marshal(out)
		fmt.Fprintln(stdout, string(b))
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "KIND\tMESSAGES\tBYTES\t")
	for _, k := range append(byKind, total) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t\n", k.Kind, k.Messages, k.Bytes)
	}
	tw.Flush()
	return 0
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// commandClient is an AgentService client for a command (agentd
// breakglass, audit compare, identity revoke) whose calls are recorded in
// the egress ledger under dir beside the running agent's; done writes
// them. Without a ledger (it cannot be opened) the calls go unrecorded,
// said on stderr.
func commandClient(dir, installID, ims string, stderr io.Writer) (agentv1connect.AgentServiceClient, func()) {
	url := strings.TrimRight(ims, "/")
	// imsd decides how large its answers are: read no more of one than
	// the agent does.
	opts := []connect.ClientOption{connect.WithReadMaxBytes(agent.MaxReceiveBytes)}
	l, err := ledger.Open(dir, ledger.Options{Install: installID, NoRotate: true})
	if err != nil {
		fmt.Fprintf(stderr, "agentd: warning: this call goes unrecorded in the egress ledger: %v\n", err)
		return agentv1connect.NewAgentServiceClient(agent.DefaultHTTPClient(), url, opts...), func() {}
	}
	opts = append(opts, connect.WithInterceptors(agent.LedgerInterceptor(l)))
	return agentv1connect.NewAgentServiceClient(agent.DefaultHTTPClient(), url, opts...), func() {
		if err := l.Close(); err != nil {
			fmt.Fprintf(stderr, "agentd: warning: egress ledger: %v\n", err)
		}
	}
}
