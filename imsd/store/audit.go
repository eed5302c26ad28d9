package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/internal/auditchain"
)

// VendorChain is the chain of vendor-wide audit events (tokens, apps,
// type registrations); every install has a chain of its own, named by its
// id.
const VendorChain = ""

// AuditEvent is one audit record. Callers set Chain, At, Kind, Actor,
// Subject and Data; the store sets Seq, Prev and Hash when it appends it.
type AuditEvent struct {
	Chain   string
	Seq     int64
	At      time.Time
	Kind    string
	Actor   string
	Subject string
	Data    map[string]string
	Prev    string
	Hash    string
}

// Record is e as the chain and an export have it.
func (e AuditEvent) Record() auditchain.Record {
	return auditchain.Record{Chain: e.Chain, Seq: e.Seq, At: nanos(e.At), Kind: e.Kind, Actor: e.Actor,
		Subject: e.Subject, Data: encodeMap(e.Data), Prev: e.Prev, Hash: e.Hash}
}

// pendingAudit is an event a write queued, with its data encoded.
type pendingAudit struct {
	rec auditchain.Record
}

// Audit queues ev in tx: it is appended to its chain when the write
// function returns nil, in the same transaction, so the change and its
// record commit together or not at all; when the record cannot be written
// the whole write fails (Vault's rule). Any write function may call it.
func (s *Store) Audit(ctx context.Context, tx *txn, ev AuditEvent) error {
	if ev.Kind == "" {
		return errs.Field("kind", "an audit event needs a kind")
	}
	tx.audit = append(tx.audit, pendingAudit{rec: auditchain.Record{Chain: ev.Chain, At: nanos(ev.At), Kind: ev.Kind,
		Actor: ev.Actor, Subject: ev.Subject, Data: encodeMap(ev.Data)}})
	return nil
}

// RecordAudit appends ev in a write of its own: on PostgreSQL it joins
// the group commit (its record chained with the batch's others at the
// batch's end), where a transaction of its own was five round trips, on
// the path of every mutating operator call (operatorapi's Auditor).
func (s *Store) RecordAudit(ctx context.Context, ev AuditEvent) error {
	if ev.Kind == "" {
		return errs.Field("kind", "an audit event needs a kind")
	}
	return s.writeMany(ctx, "record audit event", func(tx *txn) error { return s.Audit(ctx, tx, ev) })
}

// withAudit runs fn, then appends the events it queued; on an error the
// queue is dropped with the rest of fn's work.
func (s *Store) withAudit(fn func(tx *txn) error) func(tx *txn) error {
	return func(tx *txn) error {
		tx.audit = tx.audit[:0]
		if err := fn(tx); err != nil {
			tx.audit = tx.audit[:0]
			return err
		}
		if len(tx.audit) == 0 {
			return nil
		}
		if tx.pgb != nil {
			// PostgreSQL's group commit: chained and inserted at the
			// batch's end (pgGroupCommit.flush).
			for _, ev := range tx.audit {
				tx.pgb.audit = append(tx.pgb.audit, ev.rec)
			}
			tx.audit = tx.audit[:0]
			return nil
		}
		if tx.g != nil {
			// SQLite: chained now, inserted at the batch's commit.
			err := s.chainAudit(tx)
			tx.audit = tx.audit[:0]
			return err
		}
		heads, err := s.flushAudit(tx)
		tx.audit = tx.audit[:0]
		if err == nil && tx.pgHeld != nil {
			// The cache's, once the transaction commits (writeTx).
			tx.pgNew = append(tx.pgNew, heads...)
		}
		if err == nil && tx.heads != nil {
			// Kept for the batch's commit; a write that fails (or is
			// rolled back to its savepoint) never gets here.
			for _, h := range heads {
				tx.heads[h.chain] = h
			}
		}
		return err
	}
}

// chainHead is an audit chain's last record.
type chainHead struct {
	chain string
	seq   int64
	hash  string
}

// head returns chain's last record: from the batch's own appends or the
// writer's cache on SQLite, else read (locked on PostgreSQL by the caller).
func (s *Store) head(ctx context.Context, tx *txn, chain string, cached bool) (*auditchain.Record, error) {
	if cached && tx.g != nil {
		if h, ok := tx.heads[chain]; ok {
			return &auditchain.Record{Seq: h.seq, Hash: h.hash}, nil
		}
		if h, ok := tx.g.heads[chain]; ok {
			return &auditchain.Record{Seq: h.seq, Hash: h.hash}, nil
		}
	}
	var last auditchain.Record
	err := tx.QueryRowContext(ctx, s.bind(`SELECT seq, hash FROM audit_events WHERE chain = ? ORDER BY seq DESC LIMIT 1`), chain).Scan(&last.Seq, &last.Hash)
	switch {
	case err == nil:
		return &last, nil
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	default:
		return nil, fmt.Errorf("audit: read chain %q: %w", chain, err)
	}
}

// flushAudit appends tx's queued events, chain by chain in chain order,
// and returns the chains' new heads. On PostgreSQL each chain's head is
// locked first (a transaction-scoped advisory lock), in that order, after
// every row lock the write took, so two writers never wait on each other
// in a cycle, and the stripes of the heads' cache are held until the
// transaction ends (pgheads.go; writeTx releases them). On SQLite the
// single writer already excludes every other, and the head comes from
// its cache (read again if another process on the same file appended
// meanwhile: the cached next seq is then taken).
func (s *Store) flushAudit(tx *txn) ([]chainHead, error) {
	ctx := tx.c(context.Background())
	evs := tx.audit
	slices.SortStableFunc(evs, func(a, b pendingAudit) int { return strings.Compare(a.rec.Chain, b.rec.Chain) })
	if s.postgres() && tx.pgHeld == nil {
		chains := make([]string, 0, 2)
		for _, ev := range evs {
			if len(chains) == 0 || chains[len(chains)-1] != ev.rec.Chain {
				chains = append(chains, ev.rec.Chain)
			}
		}
		tx.pgHeld = s.pgh.lock(chains)
	}
	var heads []chainHead
	for i := 0; i < len(evs); {
		chain := evs[i].rec.Chain
		j := i
		for j < len(evs) && evs[j].rec.Chain == chain {
			j++
		}
		var head *auditchain.Record
		var err error
		if s.postgres() {
			head, err = s.appendPG(ctx, tx, chain, evs[i:j])
		} else {
			head, err = s.appendSQLite(ctx, tx, chain, evs[i:j])
		}
		if err != nil {
			return nil, err
		}
		heads = append(heads, chainHead{chain: chain, seq: head.Seq, hash: head.Hash})
		i = j
	}
	return heads, nil
}

// appendPG appends evs to chain on PostgreSQL and returns its new head:
// the chain's lock, then its head (migration 33), then the records. Every
// appender takes the lock, the group commit's from its cached heads too
// (pgwriter.go), so the head read under it is the chain's last.
func (s *Store) appendPG(ctx context.Context, tx *txn, chain string, evs []pendingAudit) (*auditchain.Record, error) {
	var seq sql.NullInt64
	var hash sql.NullString
	if err := tx.QueryRowContext(ctx, `SELECT seq, hash FROM byoc_audit_heads(ARRAY[$1::TEXT])`, chain).Scan(&seq, &hash); err != nil {
		return nil, fmt.Errorf("audit: lock and read chain %q: %w", chain, err)
	}
	var head *auditchain.Record
	if seq.Valid && hash.Valid {
		head = &auditchain.Record{Seq: seq.Int64, Hash: hash.String}
	}
	for _, ev := range evs {
		r := auditchain.Next(head, ev.rec)
		if err := s.insertAudit(ctx, tx, r); err != nil {
			return nil, fmt.Errorf("audit: append %s to chain %q: %w", r.Kind, chain, err)
		}
		head = &r
	}
	return head, nil
}

// appendSQLite appends evs to chain on SQLite and returns its new head.
func (s *Store) appendSQLite(ctx context.Context, tx *txn, chain string, evs []pendingAudit) (*auditchain.Record, error) {
	head, err := s.head(ctx, tx, chain, true)
	if err != nil {
		return nil, err
	}
	for k, ev := range evs {
		r := auditchain.Next(head, ev.rec)
		err := s.insertAudit(ctx, tx, r)
		if isUnique(err) && k == 0 && tx.g != nil {
			// A stale cache: read the head and try once more.
			if head, err = s.head(ctx, tx, chain, false); err != nil {
				return nil, err
			}
			r = auditchain.Next(head, ev.rec)
			err = s.insertAudit(ctx, tx, r)
		}
		if err != nil {
			return nil, fmt.Errorf("audit: append %s to chain %q: %w", r.Kind, chain, err)
		}
		head = &r
	}
	return head, nil
}

// chainAudit gives tx's queued events their seq, prev and hash, from the
// heads of the batch's earlier writes or the writer's cache (a chain in
// neither is read), and adds them to the batch's records, which the
// writer inserts just before it commits (groupCommit.insertAudit). One
// multi-row INSERT per batch instead of one statement per event: SQLite
// (modernc) spends more per statement than per row (docs/performance-store.md).
// Only the SQLite writer's transactions (tx.g set) come here.
func (s *Store) chainAudit(tx *txn) error {
	ctx := tx.c(context.Background())
	rs := make([]auditchain.Record, 0, len(tx.audit))
	local := map[string]*auditchain.Record{} // this write's own heads
	for _, ev := range tx.audit {
		head := local[ev.rec.Chain]
		if head == nil {
			var err error
			if head, err = s.head(ctx, tx, ev.rec.Chain, true); err != nil {
				return err
			}
		}
		rs = append(rs, auditchain.Next(head, ev.rec))
		local[ev.rec.Chain] = &rs[len(rs)-1]
	}
	// Only a write whose every record is chained adds them.
	tx.records = append(tx.records, rs...)
	for chain, r := range local {
		tx.heads[chain] = chainHead{chain: chain, seq: r.Seq, hash: r.Hash}
	}
	return nil
}

func (s *Store) insertAudit(ctx context.Context, tx *txn, r auditchain.Record) error {
	_, err := tx.ExecContext(ctx, s.bind(`INSERT INTO audit_events (chain, seq, at, kind, actor, subject, data, prev, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		r.Chain, r.Seq, r.At, r.Kind, r.Actor, r.Subject, r.Data, r.Prev, r.Hash)
	return err
}

// AuditFilter selects audit events.
type AuditFilter struct {
	// Chain selects one chain (an install id, or VendorChain) when
	// OneChain is set; otherwise every chain.
	Chain    string
	OneChain bool
	// Chains, when not nil, keeps only these chains (empty: none).
	Chains []string
	// Since keeps events at or after it.
	Since time.Time
	// After keeps the records after (AfterChain, AfterSeq), in the
	// answer's order: a page's continuation.
	After      bool
	AfterChain string
	AfterSeq   int64
	// Limit caps the answer (0: no cap).
	Limit int
	// NewestFirst orders by time, newest first, instead.
	NewestFirst bool
}

// ListAuditEvents returns the events f selects, by chain then seq, with
// their data decoded.
func (s *Store) ListAuditEvents(ctx context.Context, f AuditFilter) ([]AuditEvent, error) {
	rs, err := s.ListAuditRecords(ctx, f)
	if err != nil {
		return nil, err
	}
	out := make([]AuditEvent, len(rs))
	for i, r := range rs {
		if out[i], err = eventFromRecord(r); err != nil {
			return nil, fmt.Errorf("list audit events: chain %q record %d: %w", r.Chain, r.Seq, err)
		}
	}
	return out, nil
}

// ListAuditRecords returns the records f selects as stored, by chain then
// seq: data is the stored text, never re-encoded, so a verifier sees what
// the database holds.
func (s *Store) ListAuditRecords(ctx context.Context, f AuditFilter) ([]auditchain.Record, error) {
	q := `SELECT chain, seq, at, kind, actor, subject, data, prev, hash FROM audit_events WHERE at >= ?`
	args := []any{nanos(f.Since)}
	if f.OneChain {
		q += ` AND chain = ?`
		args = append(args, f.Chain)
	}
	if f.Chains != nil {
		if len(f.Chains) == 0 {
			return nil, nil
		}
		q += ` AND chain IN (` + placeholders(len(f.Chains)) + `)`
		for _, c := range f.Chains {
			args = append(args, c)
		}
	}
	if f.After {
		q += ` AND (chain > ? OR (chain = ? AND seq > ?))`
		args = append(args, f.AfterChain, f.AfterChain, f.AfterSeq)
	}
	if f.NewestFirst {
		q += ` ORDER BY at DESC, chain, seq DESC`
	} else {
		q += ` ORDER BY chain, seq`
	}
	if f.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", f.Limit)
	}
	rows, err := s.r.db.QueryxContext(ctx, s.bind(q), args...)
	if err != nil {
		return nil, fmt.Errorf("list audit events: %w", err)
	}
	defer rows.Close()
	var out []auditchain.Record
	for rows.Next() {
		var r auditchain.Record
		if err := rows.Scan(&r.Chain, &r.Seq, &r.At, &r.Kind, &r.Actor, &r.Subject, &r.Data, &r.Prev, &r.Hash); err != nil {
			return nil, fmt.Errorf("list audit events: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list audit events: %w", err)
	}
	return out, nil
}

// AuditRecords returns chain's records as stored, in seq order, for
// verification and export.
func (s *Store) AuditRecords(ctx context.Context, chain string) ([]auditchain.Record, error) {
	return s.ListAuditRecords(ctx, AuditFilter{Chain: chain, OneChain: true})
}

// AuditChains lists the chains that hold events, VendorChain first.
func (s *Store) AuditChains(ctx context.Context) ([]string, error) {
	var out []string
	if err := s.r.db.SelectContext(ctx, &out, `SELECT DISTINCT chain FROM audit_events ORDER BY chain`); err != nil {
		return nil, fmt.Errorf("list audit chains: %w", err)
	}
	return out, nil
}

func eventFromRecord(r auditchain.Record) (AuditEvent, error) {
	data, err := decodeMap(r.Data)
	if err != nil {
		return AuditEvent{}, err
	}
	return AuditEvent{Chain: r.Chain, Seq: r.Seq, At: fromNanos(r.At), Kind: r.Kind, Actor: r.Actor,
		Subject: r.Subject, Data: data, Prev: r.Prev, Hash: r.Hash}, nil
}

// jobEvent is an event about job j in its install's chain.
func jobEvent(j Job, kind, actor string, at time.Time, data map[string]string) AuditEvent {
	d := map[string]string{"type": j.ComponentType, "operation": j.Operation, "mode": string(j.Mode)}
	if j.ReleaseID != "" {
		d["release"] = j.ReleaseID
	}
	maps.Copy(d, data)
	return AuditEvent{Chain: j.InstallID, At: at, Kind: kind, Actor: actor, Subject: "job:" + j.ID, Data: d}
}

// auditAgentJob records what agent agentID did to job jobID, in the
// agent's install's chain (the job's, as every write back checks).
func (s *Store) auditAgentJob(ctx context.Context, tx *txn, agentID, jobID, kind string, at time.Time, data map[string]string) error {
	install, err := s.agentInstall(ctx, tx, agentID)
	if err != nil {
		return err
	}
	return s.Audit(ctx, tx, AuditEvent{Chain: install, At: at, Kind: kind, Actor: "agent:" + agentID, Subject: "job:" + jobID, Data: data})
}

// auditClaims records the jobs a claim handed to agentID.
func (s *Store) auditClaims(ctx context.Context, tx *txn, installID, agentID string, rows []jobRow, now time.Time) error {
	for _, r := range rows {
		if err := s.Audit(ctx, tx, AuditEvent{Chain: installID, At: now, Kind: "job.assigned", Actor: "imsd", Subject: "job:" + r.ID,
			Data: claimData(agentID, r)}); err != nil {
			return err
		}
	}
	return nil
}

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// auditAgent records an event about agent agentID in its install's chain.
func (s *Store) auditAgent(ctx context.Context, tx *txn, agentID, kind string, at time.Time, data map[string]string) error {
	install, err := s.agentInstall(ctx, tx, agentID)
	if err != nil {
		return err
	}
	return s.Audit(ctx, tx, AuditEvent{Chain: install, At: at, Kind: kind, Actor: "agent:" + agentID, Subject: "agent:" + agentID, Data: data})
}

// auditStep records the end of step name of workflow workflowID, in its
// install's chain.
func (s *Store) auditStep(ctx context.Context, tx *txn, workflowID, name string, at time.Time, data map[string]string) error {
	var install string
	if err := tx.GetContext(ctx, &install, s.bind(`SELECT install_id FROM workflows WHERE id = ?`), workflowID); err != nil {
		return fmt.Errorf("audit step %s/%s: %w", workflowID, name, err)
	}
	return s.Audit(ctx, tx, AuditEvent{Chain: install, At: at, Kind: "step.ended", Actor: "imsd", Subject: "workflow:" + workflowID + "/" + name, Data: data})
}

// RawExec runs q as given through the writer, outside any check of the
// store's: the conformance suite uses it to act as an attacker with
// access to the database (drop the audit triggers, edit rows).
func (s *Store) RawExec(ctx context.Context, q string, args ...any) error {
	return s.write(ctx, "raw exec", func(tx *txn) error {
		_, err := tx.ExecContext(ctx, s.bind(q), args...)
		return err
	})
}

// MaxAuditPage is the most records AuditRecordsAfter returns at once.
const MaxAuditPage = 1000

// AuditRecordsAfter returns up to limit (at most MaxAuditPage) records of
// chain after record afterSeq, as stored, in seq order: what an agent's
// copy of its install's chain lacks, as the database holds them (agentd
// audit compare). It reads the (chain, seq) key only.
// AuditRecordsToSend is AuditRecordsAfter for the records imsd sends an
// agent's copy as the stream goes: on SQLite it answers from the
// writer's tail of the chain when that holds them (audittail.go), which
// always includes what this imsd committed, but may lag records another
// process committed to the same file until this one next writes. Those
// follow with a later send; nothing is ever sent out of order.
func (s *Store) AuditRecordsToSend(ctx context.Context, chain string, afterSeq int64) ([]auditchain.Record, error) {
	if s.gc != nil {
		if rs, ok := s.gc.tails.after(chain, afterSeq, MaxAuditPage, false); ok {
			return rs, nil
		}
	}
	if s.pgh != nil {
		if rs, ok := s.pgh.tails.after(chain, afterSeq, MaxAuditPage, true); ok {
			return rs, nil
		}
	}
	return s.AuditRecordsAfter(ctx, chain, afterSeq, MaxAuditPage)
}

func (s *Store) AuditRecordsAfter(ctx context.Context, chain string, afterSeq int64, limit int) ([]auditchain.Record, error) {
	if limit <= 0 || limit > MaxAuditPage {
		limit = MaxAuditPage
	}
	q := fmt.Sprintf(`SELECT chain, seq, at, kind, actor, subject, data, prev, hash FROM audit_events WHERE chain = ? AND seq > ? ORDER BY seq LIMIT %d`, limit)
	rows, err := s.r.QueryContext(ctx, s.bind(q), chain, afterSeq)
	if err != nil {
		return nil, fmt.Errorf("read audit chain %q after %d: %w", chain, afterSeq, err)
	}
	defer rows.Close()
	var out []auditchain.Record
	for rows.Next() {
		var r auditchain.Record
		if err := rows.Scan(&r.Chain, &r.Seq, &r.At, &r.Kind, &r.Actor, &r.Subject, &r.Data, &r.Prev, &r.Hash); err != nil {
			return nil, fmt.Errorf("read audit chain %q after %d: %w", chain, afterSeq, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read audit chain %q after %d: %w", chain, afterSeq, err)
	}
	return out, nil
}

// claimData is the data of a job.assigned record.
func claimData(agentID string, r jobRow) map[string]string {
	d := map[string]string{"agent": agentID, "attempt": strconv.Itoa(r.Attempt)}
	if r.ReleaseID != "" {
		d["release"] = r.ReleaseID
	}
	return d
}
