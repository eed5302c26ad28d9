// Package rpcerr maps byoc's error vocabulary (package errs) to Connect
// errors. It is the only place that does: domain code never sees Connect
// codes, and internal error text never reaches a client.
package rpcerr

import (
	"context"
	"errors"
	"log/slog"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/errs"
)

var codes = map[errs.Code]connect.Code{
	errs.Invalid:          connect.CodeInvalidArgument,
	errs.NotFound:         connect.CodeNotFound,
	errs.AlreadyExists:    connect.CodeAlreadyExists,
	errs.Conflict:         connect.CodeFailedPrecondition,
	errs.PermissionDenied: connect.CodePermissionDenied,
	errs.Unauthenticated:  connect.CodeUnauthenticated,
	errs.Unavailable:      connect.CodeUnavailable,
}

// ToConnect converts err for a client. Errors outside the vocabulary are
// logged with a reference the client is given instead of their text.
func ToConnect(ctx context.Context, log *slog.Logger, err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	if errors.Is(err, context.Canceled) {
		return connect.NewError(connect.CodeCanceled, errors.New("request cancelled"))
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return connect.NewError(connect.CodeDeadlineExceeded, errors.New("request deadline exceeded"))
	}
	var e *errs.Error
	if errors.As(err, &e) {
		if code, ok := codes[e.Code]; ok {
			return connect.NewError(code, errors.New(e.Error()))
		}
	}
	ref := auth.NewID("err_")
	log.ErrorContext(ctx, "internal error", "ref", ref, "err", err)
	return connect.NewError(connect.CodeInternal, errors.New("internal error (ref "+ref+"; see the imsd log)"))
}

// CodeName returns the name of the Connect code err maps to, as carried in
// a WriteRejected message.
func CodeName(err error) string {
	if c, ok := codes[errs.CodeOf(err)]; ok {
		return c.String()
	}
	return connect.CodeInternal.String()
}
