package operatorapi

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/byoc-dev/byoc/imsd/access"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// Auditor is a Connect interceptor that records every operator call that
// may change something (every procedure whose rule needs more than
// read, and a live PlanInstall) before it runs, after the Authenticator
// allowed it: an "operator.call" event with the caller and its grants, in the chain
// of the install the request names (its top-level "install" field), else
// the vendor-wide chain. When the event cannot be written the call is
// refused and nothing happens (Vault's rule). The store adds events with
// the details of each change in the change's own transaction.
type Auditor struct {
	store *store.Store
	now   func() time.Time
}

// NewAuditor returns an Auditor over st. Put it after the Authenticator,
// which names the caller.
func NewAuditor(st *store.Store, now func() time.Time) *Auditor {
	return &Auditor{store: st, now: now}
}

var _ connect.Interceptor = (*Auditor)(nil)

// WrapUnary implements connect.Interceptor.
func (a *Auditor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		procedure := req.Spec().Procedure
		if inWrite[procedure] {
			return a.recordInWrite(ctx, procedure, req, next)
		}
		if err := a.record(ctx, procedure, req.Any()); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

// inWrite are the procedures whose record the call's own write appends,
// in its transaction (store.WithCallRecord): the enqueues, where a write
// of its own before the call was a second commit on the path of every
// job's pickup (docs/performance-postgres.md). Every way these calls
// succeed goes through one of the store's enqueue writes, which take the
// record.
var inWrite = map[string]bool{
	imsv1connect.OperatorServiceEnqueueJobProcedure:  true,
	imsv1connect.OperatorServiceEnqueueJobsProcedure: true,
}

// recordInWrite runs a call of inWrite with its record in the context,
// for the call's write to append with its change. A call that did not
// append it (refused before its write, or its write failed) has it
// appended afterwards, as the attempt it was; a call that succeeded
// without appending it (which no path of these procedures does) fails
// when the record cannot be written then.
func (a *Auditor) recordInWrite(ctx context.Context, procedure string, req connect.AnyRequest, next connect.UnaryFunc) (connect.AnyResponse, error) {
	ev, ok := a.event(ctx, procedure, req.Any())
	if !ok {
		return next(ctx, req)
	}
	cctx, call := store.WithCallRecord(ctx, ev)
	resp, err := next(cctx, req)
	if call.Written() {
		return resp, err
	}
	if werr := a.store.RecordAudit(context.WithoutCancel(ctx), ev); werr != nil && err == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("cannot write the audit record of this call; try again"))
	}
	return resp, err
}

// WrapStreamingClient implements connect.Interceptor; it is a no-op.
func (a *Auditor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler implements connect.Interceptor. A client stream
// that may change something (UploadBundleResults) is recorded when its
// first message, which names the install, has come and passed the
// Authenticator, before the handler acts on it; any other stream when
// it starts, without an install.
func (a *Auditor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if conn.Spec().StreamType == connect.StreamTypeClient {
			return next(ctx, &auditedConn{StreamingHandlerConn: conn, record: func(m any) error { return a.record(ctx, conn.Spec().Procedure, m) }})
		}
		if err := a.record(ctx, conn.Spec().Procedure, nil); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}

// auditedConn records the call with its first message.
type auditedConn struct {
	connect.StreamingHandlerConn
	record func(msg any) error
	done   bool
}

func (c *auditedConn) Receive(m any) error {
	if err := c.StreamingHandlerConn.Receive(m); err != nil || c.done {
		return err
	}
	c.done = true
	return c.record(m)
}

func (a *Auditor) record(ctx context.Context, procedure string, msg any) error {
	ev, ok := a.event(ctx, procedure, msg)
	if !ok {
		return nil
	}
	if err := a.store.RecordAudit(ctx, ev); err != nil {
		return connect.NewError(connect.CodeUnavailable, errors.New("cannot write the audit record of this call, so it was not run; try again"))
	}
	return nil
}

// event is the operator.call record of a call, and false for a call that
// changes nothing.
func (a *Auditor) event(ctx context.Context, procedure string, msg any) (store.AuditEvent, bool) {
	if !mutating(procedure, msg) {
		return store.AuditEvent{}, false
	}
	p := callerFrom(ctx)
	chain := store.VendorChain
	var roles []string
	for _, g := range p.Grants {
		roles = append(roles, g.String())
	}
	data := map[string]string{"procedure": procedure, "roles": strings.Join(roles, "; ")}
	if len(p.Grants) == 1 {
		data["role"] = string(p.Grants[0].Role)
	}
	if p.Kind == "token" {
		data["token_id"] = p.ID
	}
	if pl, ok := msg.(*imsv1.PlanInstallRequest); ok && pl.GetLive() {
		data["live"] = "true"
	}
	if name := installField(msg); name != "" {
		data["install"] = name
		if id, err := a.store.InstallID(ctx, name); err == nil {
			chain = id
		}
	}
	return store.AuditEvent{Chain: chain, At: a.now(), Kind: "operator.call", Actor: p.Actor(),
		Subject: procedure[strings.LastIndex(procedure, "/")+1:], Data: data}, true
}

// installField returns a request's top-level string field "install".
func installField(msg any) string {
	m, ok := msg.(proto.Message)
	if !ok || m == nil {
		return ""
	}
	r := m.ProtoReflect()
	f := r.Descriptor().Fields().ByName("install")
	if f == nil || f.IsList() || f.IsMap() || f.Kind().String() != "string" {
		return ""
	}
	return r.Get(f).String()
}

// maxAuditPage is the largest page of ListAuditEvents.
const maxAuditPage = 5000

// ListAuditEvents implements OperatorService.
func (s *Service) ListAuditEvents(ctx context.Context, req *connect.Request[imsv1.ListAuditEventsRequest]) (*connect.Response[imsv1.ListAuditEventsResponse], error) {
	m := req.Msg
	if m.Install != "" && m.Vendor {
		return nil, s.err(ctx, errs.Field("vendor", "give install or vendor, not both"))
	}
	if m.Selector != "" && (m.Install != "" || m.Vendor) {
		return nil, s.err(ctx, errs.Field("selector", "selects installs' chains: give it without install or vendor"))
	}
	selected, err := s.selectedInstalls(ctx, "selector", m.Selector)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	if m.Limit < 0 {
		return nil, s.err(ctx, errs.Field("limit", "must not be negative, got %d", m.Limit))
	}
	f := store.AuditFilter{Since: time.Unix(0, m.SinceUnixNano), Limit: maxAuditPage}
	if m.SinceUnixNano <= 0 {
		f.Since = time.Time{}
	}
	if m.Limit > 0 && m.Limit < maxAuditPage {
		f.Limit = int(m.Limit)
	}
	switch {
	case m.Install != "":
		id, err := s.store.InstallID(ctx, m.Install)
		if err != nil {
			return nil, s.err(ctx, err)
		}
		f.Chain, f.OneChain = id, true
	case m.Vendor:
		if p := callerFrom(ctx); !p.Everywhere(access.Read) {
			return nil, s.err(ctx, denied(p, "read the vendor-wide audit chain", access.Read, access.Target{}))
		}
		f.Chain, f.OneChain = store.VendorChain, true
	}
	if m.NewestFirst && m.PageToken != "" {
		return nil, s.err(ctx, errs.Field("page_token", "newest_first answers have no pages"))
	}
	f.NewestFirst = m.NewestFirst
	if m.PageToken != "" {
		chain, seq, err := parseAuditPage(m.PageToken)
		if err != nil {
			return nil, s.err(ctx, err)
		}
		if f.OneChain && chain != f.Chain {
			return nil, s.err(ctx, errs.Field("page_token", "belongs to another chain"))
		}
		f.After, f.AfterChain, f.AfterSeq = true, chain, seq
	}
	v, err := s.readView(ctx)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	if !f.OneChain {
		// A scoped caller reads its installs' chains only, in the query,
		// so its pages are full.
		f.Chains = v.restrict(selected)
	}
	evs, err := s.store.ListAuditRecords(ctx, f)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	out := &imsv1.ListAuditEventsResponse{Events: make([]*imsv1.AuditEvent, 0, len(evs))}
	for _, r := range evs {
		if !v.all && (r.Chain == store.VendorChain || !v.visible(r.Chain)) {
			continue // a scoped caller sees its installs' chains only
		}
		out.Events = append(out.Events, &imsv1.AuditEvent{Chain: r.Chain, Seq: r.Seq, AtUnixNano: r.At, Kind: r.Kind, Actor: r.Actor,
			Subject: r.Subject, Data: r.Data, Prev: r.Prev, Hash: r.Hash})
	}
	if len(evs) == f.Limit && !f.NewestFirst {
		last := evs[len(evs)-1]
		out.NextPageToken = strconv.FormatInt(last.Seq, 10) + ":" + last.Chain
	}
	return connect.NewResponse(out), nil
}

func parseAuditPage(tok string) (chain string, seq int64, err error) {
	n, chain, ok := strings.Cut(tok, ":")
	if ok {
		seq, err = strconv.ParseInt(n, 10, 64)
	}
	if !ok || err != nil || seq < 1 {
		return "", 0, errs.Field("page_token", "not a token this server gave: %q", fmt.Sprintf("%.40s", tok))
	}
	return chain, seq, nil
}
