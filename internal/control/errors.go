package control

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/repool/repool/internal/store"
)

// Error codes of {"error":{"code","message"}} bodies.
const (
	codeInvalidArgument   = "invalid_argument"
	codeUnauthenticated   = "unauthenticated"
	codePermissionDenied  = "permission_denied"
	codeNotFound          = "not_found"
	codeAlreadyExists     = "already_exists"
	codeConflict          = "conflict"
	codeResourceExhausted = "resource_exhausted"
	codeMethodNotAllowed  = "method_not_allowed"
	codeUnavailable       = "unavailable"
	codeInternal          = "internal"
)

// apiError is an error written for the client: its message is sent as is.
// Every other error reaching writeError is logged and answered generically.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.code + ": " + e.msg }

func invalidArgument(format string, args ...any) error {
	return &apiError{http.StatusBadRequest, codeInvalidArgument, fmt.Sprintf(format, args...)}
}

func permissionDenied(msg string) error {
	return &apiError{http.StatusForbidden, codePermissionDenied, msg}
}

func notFound(format string, args ...any) error {
	return &apiError{http.StatusNotFound, codeNotFound, fmt.Sprintf(format, args...)}
}

func conflict(format string, args ...any) error {
	return &apiError{http.StatusConflict, codeConflict, fmt.Sprintf(format, args...)}
}

// fromStore turns the store's not-found and already-exists errors into
// client errors about what (for example `tenant "acme"`). Other errors pass
// through unchanged for writeError, which logs them.
func fromStore(err error, what string) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return notFound("%s not found", what)
	case errors.Is(err, store.ErrExists):
		return &apiError{http.StatusConflict, codeAlreadyExists, what + " already exists"}
	}
	return err
}

// writeError answers err. It is the one place where errors become HTTP
// statuses: client errors (apiError) are sent as they are; a store outage
// or timeout is 503; anything else is a bug or a dependency failure, logged
// with its text and answered 500 with a generic message.
func (a *API) writeError(w http.ResponseWriter, r *http.Request, c caller, err error) {
	var ae *apiError
	if errors.As(err, &ae) {
		writeAPIError(w, ae)
		return
	}
	log := a.log.With("method", r.Method, "route", r.Pattern, "tenant", r.PathValue("id"), "actor", c.actor())
	switch {
	case errors.Is(err, store.ErrUnavailable),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		log.WarnContext(r.Context(), "control request failed: store unavailable", "err", err)
		w.Header().Set("Retry-After", "1")
		writeAPIError(w, &apiError{http.StatusServiceUnavailable, codeUnavailable, "the store is unavailable; retry later"})
	default:
		log.ErrorContext(r.Context(), "control request failed", "err", err)
		writeAPIError(w, &apiError{http.StatusInternalServerError, codeInternal, "internal error"})
	}
}

// errorBody is the JSON of every error response.
type errorBody struct {
	Error errorJSON `json:"error"`
}

type errorJSON struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func writeAPIError(w http.ResponseWriter, e *apiError) {
	if e.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="repool"`)
	}
	writeJSON(w, e.status, errorBody{errorJSON{e.code, e.msg}})
}
