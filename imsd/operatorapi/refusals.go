package operatorapi

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/time/rate"
	"google.golang.org/protobuf/proto"

	"github.com/byoc-dev/byoc/imsd/access"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
)

// refusalError is a call refused for want of a role: a permission_denied
// *errs.Error with the target the rule checked.
type refusalError struct {
	err    *errs.Error
	target access.Target
}

func (e *refusalError) Error() string { return e.err.Error() }
func (e *refusalError) Unwrap() error { return e.err }

// refusalNote carries a handler's refusal target out to the
// Authenticator, which records the refusal once the handler returns.
type refusalNote struct {
	mu     sync.Mutex
	target *access.Target
}

type refusalNoteKey struct{}

// noteRefusal tells the Authenticator which target a handler refused,
// when err is a refusal and the call carries a note.
func noteRefusal(ctx context.Context, err error) {
	var r *refusalError
	if !errors.As(err, &r) {
		return
	}
	if n, ok := ctx.Value(refusalNoteKey{}).(*refusalNote); ok {
		n.mu.Lock()
		t := r.target
		n.target = &t
		n.mu.Unlock()
	}
}

// Refusal records are rate limited per actor: a caller may leave
// refusalBurst records at once and one more every refusalEvery after;
// refusals past that are counted, not written, and the next record
// written says how many were left out ("suppressed"). So a client
// retrying a refused call in a loop adds about 60 records an hour to the
// audit, not one per call. At most refusalActors actors are tracked;
// past that the table is cleared (each actor starts a new burst).
const (
	refusalBurst  = 10
	refusalEvery  = time.Minute
	refusalActors = 10000
)

// refusals writes "operator.refused" audit events.
type refusals struct {
	store *store.Store
	now   func() time.Time
	log   *slog.Logger

	mu     sync.Mutex
	actors map[string]*actorRefusals
}

type actorRefusals struct {
	lim        *rate.Limiter
	suppressed int
}

// allow reports whether a refusal by actor may be written now, and how
// many of its refusals were left out since the last one written.
func (r *refusals) allow(actor string) (bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.actors[actor]
	if a == nil {
		if len(r.actors) >= refusalActors {
			clear(r.actors)
		}
		a = &actorRefusals{lim: rate.NewLimiter(rate.Every(refusalEvery), refusalBurst)}
		r.actors[actor] = a
	}
	if !a.lim.AllowN(r.now(), 1) {
		a.suppressed++
		return false, 0
	}
	n := a.suppressed
	a.suppressed = 0
	return true, n
}

// record writes the audit event of a call by p to procedure refused with
// err (a connect error of code permission_denied): in the chain of the
// install it targeted, when that is known and exists, else the
// vendor-wide chain. t is the target the rule refused (nil when only
// the error is known); msg is the request, for the ids it names. A
// record that cannot be written is logged: the call stays refused.
func (r *refusals) record(ctx context.Context, p access.Principal, procedure string, msg any, t *access.Target, err error) {
	ok, suppressed := r.allow(p.Actor())
	if !ok {
		return
	}
	data := map[string]string{"procedure": procedure, "reason": connectMessage(err)}
	var roles []string
	for _, g := range p.Grants {
		roles = append(roles, g.String())
	}
	if len(roles) > 0 {
		data["roles"] = strings.Join(roles, "; ")
	}
	if p.Kind == "token" {
		data["token_id"] = p.ID
	}
	if suppressed > 0 {
		data["suppressed"] = strconv.Itoa(suppressed)
	}
	install := ""
	if t != nil {
		data["target"] = t.Describe()
		install = t.Install
	}
	if ru, ok := rules[procedure]; ok && ru.field != "" {
		if v := stringField(protoMsg(msg), ru.field); v != "" {
			data[ru.field] = v
			if install == "" && (ru.on == onInstall || ru.on == onInstallOrList) {
				install = v
			}
		}
	}
	if install == "" {
		install = installField(msg)
	}
	chain := store.VendorChain
	if install != "" {
		if id, err := r.store.InstallID(ctx, install); err == nil {
			chain = id
			data["install"] = install
		}
	}
	ev := store.AuditEvent{Chain: chain, At: r.now(), Kind: "operator.refused", Actor: p.Actor(),
		Subject: procedure[strings.LastIndex(procedure, "/")+1:], Data: data}
	// The caller's context may be cancelled as soon as it has its answer.
	if err := r.store.RecordAudit(context.WithoutCancel(ctx), ev); err != nil {
		r.log.WarnContext(ctx, "cannot write the audit record of a refused call", "actor", p.Actor(), "procedure", procedure, "err", err)
	}
}

// protoMsg returns msg as a proto.Message, or nil.
func protoMsg(msg any) proto.Message {
	m, _ := msg.(proto.Message)
	return m
}

// connectMessage is the message of a connect error without its code.
func connectMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}
