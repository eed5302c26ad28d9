// Package errs is byoc's one error vocabulary. Domain code returns *Error
// values with a small set of codes; only the RPC edge maps them to Connect
// codes, and only the message of an *Error ever reaches a client. Any other
// error is internal and its text stays in the server log.
package errs

import (
	"errors"
	"fmt"
)

// Code classifies an error.
type Code string

// The codes. Keep the set small: a client acts on the code, a person reads
// the message.
const (
	Invalid          Code = "invalid"           // the request is malformed; Field names what
	NotFound         Code = "not_found"         // the named thing does not exist
	AlreadyExists    Code = "already_exists"    // a thing with that name or id exists
	Conflict         Code = "conflict"          // the thing is in a state that forbids the call (a stale fencing token, a finished job)
	PermissionDenied Code = "permission_denied" // the caller may not do this
	Unauthenticated  Code = "unauthenticated"   // the caller did not prove who it is
	Unavailable      Code = "unavailable"       // try again later
	Internal         Code = "internal"          // a bug or an unexpected failure
)

// Error is an error a client may see.
type Error struct {
	Code Code
	// Field names the offending request field, as a path ("config.steps[0]").
	Field   string
	Message string
}

func (e *Error) Error() string {
	if e.Field != "" {
		return e.Field + ": " + e.Message
	}
	return e.Message
}

// E returns an *Error with a formatted message.
func E(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Field returns an Invalid *Error that names a request field.
func Field(field, format string, args ...any) *Error {
	return &Error{Code: Invalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of the first *Error in err's chain, Internal for
// any other non-nil error, and "" for nil.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Internal
}

// Is reports whether err carries code.
func Is(err error, code Code) bool { return err != nil && CodeOf(err) == code }

// Prefix puts path in front of the field an *Error names ("jobs[2]" and
// "install" make "jobs[2].install"), or makes path the field when it names
// none, so an error about one item of a list says which. Any other error
// is returned as it is.
func Prefix(path string, err error) error {
	var e *Error
	if !errors.As(err, &e) {
		return err
	}
	out := *e
	out.Field = path
	if e.Field != "" {
		out.Field = path + "." + e.Field
	}
	return &out
}
