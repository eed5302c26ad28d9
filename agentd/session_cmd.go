package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/byoc-dev/byoc/agentd/auditlog"
	"github.com/byoc-dev/byoc/agentd/sessionrec"
	"github.com/byoc-dev/byoc/internal/asciicast"
	"github.com/byoc-dev/byoc/internal/reltime"
	"github.com/byoc-dev/byoc/rpc/agentproto"
)

const sessionUsage = `usage: agentd session [--state-dir DIR] COMMAND

The vendor's interactive support sessions (byoc support shell) in this
install, as the agent recorded them on the customer's side: each in
asciicast v2 (DIR/sessions/ID.cast: what the operator typed and saw,
with timing, replayable with any asciinema player), its SHA-256 in the
agent's audit journal. A session needs a live break-glass grant approved
with --allow-sessions (agentd breakglass approve ID --role ROLE --for D
--allow-sessions).

  list                     every session: id, operator, grant, started,
                           ended, bytes
  watch ID                 follow a session live, as its operator sees it
                           (until it ends; Ctrl-C stops watching only)
  kill ID                  end a running session (within a second)
  play ID [--speed N]      replay a session's output with its timing
                           (N times faster); --raw writes the output
                           bytes exactly, at once; an ended session's
                           recording is checked first against the SHA-256
                           in the journal's session.ended record
`

// sessionCmd runs "agentd session ...".
func sessionCmd(ctx context.Context, args []string, stdout, stderr io.Writer, now func() time.Time) int {
	fs := flag.NewFlagSet("agentd session", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), sessionUsage) }
	stateDir := fs.String("state-dir", os.Getenv("BYOC_STATE_DIR"), "the agent's state `directory`; also $BYOC_STATE_DIR")
	speed := fs.Float64("speed", 1, "play: replay `N` times faster (0.1 to 1000)")
	raw := fs.Bool("raw", false, "play: write the output bytes exactly, with no timing")
	asJSON := fs.Bool("json", false, "list: one JSON object a session")
	words, code := parseWords(fs, args, stdout)
	if words == nil {
		return code
	}
	cmd, rest := words[0], words[1:]
	want, ok := map[string]int{"list": 0, "watch": 1, "kill": 1, "play": 1}[cmd]
	if !ok {
		fmt.Fprintf(stderr, "agentd session: unknown command %q\n\n%s", cmd, sessionUsage)
		return 2
	}
	if len(rest) != want {
		fmt.Fprintf(stderr, "agentd session %s: want %d argument(s), got %d\n", cmd, want, len(rest))
		return 2
	}
	if *speed < 0.1 || *speed > 1000 {
		fmt.Fprintf(stderr, "agentd session: --speed %g: want 0.1 to 1000\n", *speed)
		return 2
	}
	state, code := stateDirArg("agentd session", *stateDir, stderr)
	if code != 0 {
		return code
	}
	dir := sessionrec.Dir(state)
	if len(rest) == 1 {
		if err := agentproto.CheckShellSessionID(rest[0]); err != nil {
			fmt.Fprintf(stderr, "agentd session %s: %v\n", cmd, err)
			return 2
		}
		if _, err := sessionrec.ReadMeta(dir, rest[0]); err != nil {
			fmt.Fprintf(stderr, "agentd session %s: no session %s in %s (agentd session list)\n", cmd, rest[0], dir)
			return 1
		}
	}
	var err error
	switch cmd {
	case "list":
		err = sessionList(dir, *asJSON, stdout, now())
	case "watch":
		err = sessionWatch(ctx, dir, rest[0], stdout)
	case "kill":
		err = sessionKill(ctx, dir, rest[0], stdout)
	case "play":
		err = sessionPlay(ctx, state, dir, rest[0], *speed, *raw, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "agentd session %s: %v\n", cmd, err)
		return 1
	}
	return 0
}

func sessionList(dir string, asJSON bool, stdout io.Writer, now time.Time) error {
	ms, err := sessionrec.List(dir)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		for _, m := range ms {
			if err := enc.Encode(m); err != nil {
				return err
			}
		}
		return nil
	}
	if len(ms) == 0 {
		fmt.Fprintln(stdout, "no support sessions")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tOPERATOR\tGRANT\tSTARTED\tENDED\tBYTES OUT/IN\tREASON")
	for _, m := range ms {
		ended := "running"
		if !m.Ended.IsZero() {
			ended = m.Ended.Local().Format(time.DateTime)
		} else if st, err := os.Stat(sessionrec.CastPath(dir, m.ID)); err == nil {
			m.OutputBytes = st.Size() // roughly, while it runs
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s (%s)\t%s\t%d/%d\t%s\n", shown(m.ID), shown(m.Operator), shown(m.Grant), m.Started.Local().Format(time.DateTime),
			reltime.Since(now, m.Started), ended, m.OutputBytes, m.InputBytes, shown(m.Reason))
	}
	return tw.Flush()
}

func sessionKill(ctx context.Context, dir, id string, stdout io.Writer) error {
	m, _ := sessionrec.ReadMeta(dir, id)
	if !m.Ended.IsZero() {
		return fmt.Errorf("session %s already ended at %s: %s", id, m.Ended.Local().Format(time.DateTime), m.Reason)
	}
	if err := os.WriteFile(sessionrec.KillPath(dir, id), []byte(whoami()+"\n"), 0o600); err != nil {
		return err
	}
	// The running agent looks for the kill file ten times a second.
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		m, err := sessionrec.ReadMeta(dir, id)
		if err == nil && !m.Ended.IsZero() {
			fmt.Fprintf(stdout, "killed %s (%s); recording %s, sha256 %s\n", id, m.Reason, sessionrec.CastPath(dir, id), m.SHA256)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("session %s did not end within 10s: is its agent running? (the kill file %s stays until it does)", id, sessionrec.KillPath(dir, id))
		case <-t.C:
		}
	}
}

// sessionWatch writes the recording's output as it grows, until the
// session ended and everything was written.
func sessionWatch(ctx context.Context, dir, id string, stdout io.Writer) error {
	f, err := os.Open(sessionrec.CastPath(dir, id))
	if err != nil {
		return err
	}
	defer f.Close()
	var pending []byte
	buf := make([]byte, 64<<10)
	header := true
	// The operator's output as a terminal draws it, without the control
	// strings that would reach past it (the clipboard: asciicast.Safe).
	safe := asciicast.Safe(stdout)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		n, rerr := f.Read(buf)
		pending = append(pending, buf[:n]...)
		for {
			i := strings.IndexByte(string(pending), '\n')
			if i < 0 {
				break
			}
			line := pending[:i]
			pending = pending[i+1:]
			if header {
				header = false
				continue
			}
			var ev []json.RawMessage
			if json.Unmarshal(line, &ev) != nil || len(ev) != 3 {
				continue
			}
			var code, data string
			json.Unmarshal(ev[1], &code)
			json.Unmarshal(ev[2], &data)
			if code == "o" {
				io.WriteString(safe, data)
			}
		}
		if n > 0 {
			continue
		}
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return rerr
		}
		if m, err := sessionrec.ReadMeta(dir, id); err == nil && !m.Ended.IsZero() {
			// Ended: the recording was synced before the summary said so.
			if n, _ := f.Read(buf); n > 0 {
				pending = append(pending, buf[:n]...)
				continue
			}
			fmt.Fprintf(stdout, "\r\n[agentd] session %s %s\r\n", id, m.Reason)
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// sessionPlay replays a recording's output with its timing, or (raw)
// writes its output bytes exactly.
func sessionPlay(ctx context.Context, state, dir, id string, speed float64, raw bool, stdout io.Writer) error {
	path := sessionrec.CastPath(dir, id)
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	// An ended session's recording is played only if it is the one the
	// agent hashed at its end: the journal's session.ended record (which
	// agentd audit verify vouches for), else its summary.
	if want, from := endedSHA256(state, dir, id); want != "" {
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); got != want {
			return fmt.Errorf("%s is altered: its SHA-256 is %s, %s recorded %s when the session ended; not playing it", path, got, from, want)
		}
	}
	_, evs, err := sessionrec.Read(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return asciicast.Play(ctx, evs, speed, raw, stdout)
}

// endedSHA256 is the SHA-256 of session id's recording as the agent
// recorded it when the session ended, and where: its journal's
// session.ended record, else its summary; "" while it runs.
func endedSHA256(state, dir, id string) (sum, from string) {
	if rs, err := auditlog.ReadFile(filepath.Join(auditlog.Dir(state), auditlog.AgentFile)); err == nil {
		for i := len(rs) - 1; i >= 0; i-- {
			if rs[i].Kind != "session.ended" || rs[i].Subject != "session:"+id {
				continue
			}
			var d map[string]string
			if json.Unmarshal([]byte(rs[i].Data), &d) == nil && d["recording_sha256"] != "" {
				return d["recording_sha256"], "the agent's journal (session.ended, seq " + strconv.FormatInt(rs[i].Seq, 10) + ")"
			}
		}
	}
	if m, err := sessionrec.ReadMeta(dir, id); err == nil && !m.Ended.IsZero() && m.SHA256 != "" {
		return m.SHA256, "its summary " + id + ".json"
	}
	return "", ""
}

// shown makes a summary's text safe for the columns and the terminal:
// what imsd sent (the operator's name) is shown, never obeyed, whatever
// an older agent kept.
func shown(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return utf8.RuneError
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
}
