package ocicopy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"

	"oras.land/oras-go/v2/registry/remote/errcode"
)

// Side says which end of a copy an error came from.
type Side string

// The two ends of a copy.
const (
	Source      Side = "source"
	Destination Side = "destination"
)

// UnreachableError is a registry that could not be reached: the
// connection was refused, reset or timed out, the name did not resolve,
// or the registry (or a proxy in front of it) answered 502, 503 or 504.
// Callers word outages with it (errors.As).
type UnreachableError struct {
	Side Side
	// Registry is the repository's registry as a location string.
	Registry string
	Err      error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("%s registry %s is unreachable: %v", e.Side, e.Registry, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// sideError marks err as side's: an unreachable registry becomes an
// *UnreachableError; anything else is wrapped with what was being done.
func sideError(side Side, r *Repo, what string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s %s: %w", what, r.Name(), err)
	}
	var ue *UnreachableError
	if errors.As(err, &ue) {
		return err
	}
	if unreachable(err) {
		return &UnreachableError{Side: side, Registry: r.Registry().String(), Err: fmt.Errorf("%s %s: %w", what, r.Name(), err)}
	}
	var resp *errcode.ErrorResponse
	if side == Destination && errors.As(err, &resp) && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) {
		return fmt.Errorf("%s %s: %w (%s)", what, r.Name(), err, DeniedHint)
	}
	return fmt.Errorf("%s %s: %w", what, r.Name(), err)
}

// DeniedHint explains a destination registry's 401 or 403.
const DeniedHint = "the registry refused these credentials: on Azure the job's mode identity needs AcrPush on the install registry, " +
	"on Google Cloud the mode's service account roles/artifactregistry.writer on its repository, elsewhere check BYOC_INSTALL_REGISTRY_USERNAME/_PASSWORD/_TOKEN"

// errServerClosedIdle is the text of net/http's unexported
// errServerClosedIdle.
const errServerClosedIdle = "http: server closed idle connection"

func unreachable(err error) bool {
	var ne net.Error
	var dns *net.DNSError
	var op *net.OpError
	var resp *errcode.ErrorResponse
	switch {
	case errors.As(err, &dns), errors.As(err, &op):
		return true
	case errors.As(err, &ne) && ne.Timeout():
		return true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return true
	case strings.Contains(err.Error(), errServerClosedIdle):
		// net/http's own error when the registry closed the kept-alive
		// connection a request went out on (not exported): the server
		// went away between two requests.
		return true
	case errors.As(err, &resp):
		switch resp.StatusCode {
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
	}
	return false
}
