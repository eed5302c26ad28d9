package agent

import (
	"context"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/byoc-dev/byoc/agentd/ledger"
)

// ledgerInterceptor records the request of every call the agent makes to
// imsd (enrolment, and the calls of its commands) in l; none for a nil l.
// The stream's messages are recorded by the channel's tap instead.
func ledgerInterceptor(l *ledger.Ledger) []connect.ClientOption {
	if l == nil {
		return nil
	}
	return []connect.ClientOption{connect.WithInterceptors(LedgerInterceptor(l))}
}

// LedgerInterceptor records each unary request's kind, size and hash in
// l before it is sent.
func LedgerInterceptor(l *ledger.Ledger) connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if m, ok := req.Any().(proto.Message); ok && req.Spec().IsClient {
				if b, err := proto.Marshal(m); err == nil {
					l.RecordMessage(ledger.UnaryKind(req.Spec().Procedure), "", m, b)
				}
			}
			return next(ctx, req)
		}
	})
}
