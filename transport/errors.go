package transport

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinel errors. Errors returned by this package wrap one of these (test with
// errors.Is). A Backend may wrap them too: the server maps every error to a gRPC
// status code exactly once, at its edge, by these sentinels, by the rules
// registered with WithErrorCode and by the Backend's own (ErrorCoder).
var (
	// ErrBadRequest: a ticket or FlightDescriptor that cannot be decoded or
	// fails validation (unknown field, wrong version, B % D != 0, ...).
	// Code: InvalidArgument.
	ErrBadRequest = errors.New("invalid request")
	// ErrTicketTooLarge: a ticket or command longer than MaxTicketBytes.
	// Code: InvalidArgument (not ResourceExhausted: retrying cannot help).
	ErrTicketTooLarge = errors.New("ticket too large")
	// ErrPermissionDenied: a request names a dataset outside the server's
	// allowed roots, or a URI with a ".." segment. Code: PermissionDenied.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrUnauthenticated: the bearer token is missing or wrong.
	// Code: Unauthenticated.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrTooManyStreams: the server already serves its maximum number of
	// concurrent DoGet streams. Code: ResourceExhausted (retry later).
	ErrTooManyStreams = errors.New("too many concurrent streams")
	// ErrNotFound: a dataset (object, glob without match) does not exist.
	// Code: NotFound.
	ErrNotFound = errors.New("not found")
	// ErrUnavailable: storage or another dependency is unavailable for now.
	// Code: Unavailable (retry with backoff).
	ErrUnavailable = errors.New("unavailable")
	// ErrFailedPrecondition: the request is well formed but cannot be planned
	// on this dataset (last_batch=raise with N % B != 0, schema mismatch,
	// start position past the end, ...). Code: FailedPrecondition.
	ErrFailedPrecondition = errors.New("failed precondition")
	// ErrConfig: an invalid server configuration (see Config.Validate).
	ErrConfig = errors.New("invalid server configuration")
	// ErrTooLarge: a request whose step or stream would not fit the
	// server's configured limits (max message size, memory budget); the
	// message gives the numbers and what to change. Code: ResourceExhausted
	// (the same request fails again unless the server's load or limits
	// change).
	ErrTooLarge = errors.New("request exceeds the server's limits")
	// ErrIdle: a stream whose client read nothing for the idle timeout
	// (WithIdleTimeout) while a step waited to be sent; the server ended it
	// to free its slot and memory. Code: Unavailable (reconnect and resume).
	ErrIdle = errors.New("stream idle")
	// ErrProtocol: a shared-memory client broke the protocol (a release of a
	// slot it does not hold, a malformed frame); the server ends that
	// connection. Code: InvalidArgument.
	ErrProtocol = errors.New("protocol violation")
)

// codeRule maps every error that errors.Is a target to a code.
type codeRule struct {
	target error
	code   codes.Code
}

// builtinRules are consulted after the rules registered with WithErrorCode.
var builtinRules = []codeRule{
	{ErrBadRequest, codes.InvalidArgument},
	{ErrTicketTooLarge, codes.InvalidArgument},
	{ErrPermissionDenied, codes.PermissionDenied},
	{ErrUnauthenticated, codes.Unauthenticated},
	{ErrTooManyStreams, codes.ResourceExhausted},
	{ErrNotFound, codes.NotFound},
	{ErrUnavailable, codes.Unavailable},
	{ErrFailedPrecondition, codes.FailedPrecondition},
	{ErrTooLarge, codes.ResourceExhausted},
	{ErrIdle, codes.Unavailable},
	{ErrProtocol, codes.InvalidArgument},
	{context.Canceled, codes.Canceled},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
}

// codeOf returns the gRPC code for err: the first matching registered rule,
// then the built-in sentinels (context errors included), then the backend's
// rules (ErrorCoder), then the code of a gRPC status error anywhere in the
// chain (for example a failed Send to a client that went away), else
// Internal.
func codeOf(rules []codeRule, backend []ErrorCode, err error) codes.Code {
	for _, r := range rules {
		if errors.Is(err, r.target) {
			return r.code
		}
	}
	for _, r := range builtinRules {
		if errors.Is(err, r.target) {
			return r.code
		}
	}
	for _, r := range backend {
		if errors.Is(err, r.Target) {
			return r.Code
		}
	}
	if st, ok := status.FromError(err); ok {
		return st.Code()
	}
	return codes.Internal
}

// toStatus converts err into a gRPC status error. It is called once, by the
// server's interceptors, for every error a handler returns; handlers return
// plain wrapped errors.
func toStatus(rules []codeRule, backend []ErrorCode, err error) error {
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok && errors.Is(err, st.Err()) {
		// Already a bare status (from gRPC itself): keep it.
		return err
	}
	return status.Error(codeOf(rules, backend, err), capMessage(err.Error(), MaxStatusMessage))
}

// MaxStatusMessage bounds the bytes of an error message sent as a gRPC
// status (or a shared-memory error frame). gRPC carries the message in a
// trailer, percent-encoding every byte outside printable ASCII (up to three
// bytes each), and clients refuse trailers past 8-16 KiB with an error of
// their own ("metadata size exceeds soft limit", RST_STREAM) that hides
// the real one; so a longer message keeps its first and last bytes and says
// how many were cut between them.
const MaxStatusMessage = 4 << 10

// capMessage returns msg when it is at most limit bytes, else its head and
// tail (cut at UTF-8 boundaries) around a note of the bytes left out.
func capMessage(msg string, limit int) string {
	if len(msg) <= limit {
		return msg
	}
	tailLen := limit / 8
	headLen := limit - tailLen - 64
	for headLen > 0 && !utf8.RuneStart(msg[headLen]) {
		headLen--
	}
	tail := len(msg) - tailLen
	for tail < len(msg) && !utf8.RuneStart(msg[tail]) {
		tail++
	}
	return fmt.Sprintf("%s ... [%d bytes cut from this message of %d] ... %s", msg[:headLen], tail-headLen, len(msg), msg[tail:])
}

// problems collects validation problems so that all of them are reported at
// once.
type problems []string

func (p *problems) add(format string, args ...any) {
	*p = append(*p, fmt.Sprintf(format, args...))
}

// err returns nil when there are no problems, else an error wrapping sentinel
// whose message lists every problem.
func (p problems) err(prefix string, sentinel error) error {
	switch len(p) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%s: %w: %s", prefix, sentinel, p[0])
	default:
		return fmt.Errorf("%s: %w: %d problems: %s", prefix, sentinel, len(p), strings.Join(p, "; "))
	}
}
