package dataplane

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/tap"

	"github.com/repool/repool/internal/auth"
	"github.com/repool/repool/internal/callbudget"
)

// errUnverifiedTooLong ends an unverified call that did not authenticate
// within the budget's hold (a request trickling in, or never sent).
var errUnverifiedTooLong = errors.New("call not authenticated in time")

// Tap is the gRPC server's InTapHandle: it runs for every new call before
// gRPC reads the call's request, under the connection's lock, so it asks
// nothing of the store. A data-plane call without a credential, or with a
// malformed key or a token that does not verify, is refused
// UNAUTHENTICATED before a byte of its request is read. Every other call
// takes a slot of Config.Calls: of the tenant its credential claims, or
// an unverified one (a key not seen yet; health checks and reflection);
// none free is RESOURCE_EXHAUSTED. The slot is given back when the call
// ends; an unverified call that has not authenticated within the budget's
// hold is ended.
func (s *Service) Tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if s.cfg.Calls == nil {
		return ctx, nil
	}
	t := &tapped{}
	if guarded(info.FullMethodName) {
		apiKey, bearer := credentials(info.Header)
		if bearer != "" {
			// The token is verified here once: authenticate takes the
			// claims from the context instead of verifying it again.
			var ok bool
			if t.token, ok = s.cfg.Auth.ClaimBearer(bearer); !ok {
				return nil, toStatus(ctx, s.log, auth.ErrUnauthenticated)
			}
			t.bearer = bearer
			t.tenant = t.token.Tenant()
		} else {
			var v auth.Verdict
			if t.tenant, v = s.cfg.Auth.Claim(apiKey, ""); v == auth.Invalid {
				return nil, toStatus(ctx, s.log, auth.ErrUnauthenticated)
			}
		}
	}
	slot, err := s.cfg.Calls.Admit(t.tenant)
	if err != nil {
		return nil, toStatus(ctx, s.log, fmt.Errorf("%w: %v", ErrOverBudget, err))
	}
	t.slot = slot
	if t.tenant != "" {
		context.AfterFunc(ctx, slot.Release)
		return context.WithValue(ctx, tappedKey{}, t), nil
	}
	ctx, cancel := context.WithCancelCause(ctx)
	hold := time.AfterFunc(s.cfg.Calls.Hold(), func() {
		if slot.Expired() {
			cancel(errUnverifiedTooLong)
		}
	})
	context.AfterFunc(ctx, func() {
		hold.Stop()
		slot.Release()
	})
	return context.WithValue(ctx, tappedKey{}, t), nil
}

// tappedKey carries what Tap learnt of a call (*tapped) on its context.
type tappedKey struct{}

// tapped is what Tap learnt of a call: its callbudget slot and, for a
// bearer token, the token as sent and its verified claims.
type tapped struct {
	slot   *callbudget.Slot
	tenant string
	bearer string
	token  auth.Verified
}

// verifiedBearer returns the claims Tap verified of the call's bearer
// token, if it is the token tok.
func verifiedBearer(ctx context.Context, tok string) (auth.Verified, bool) {
	t, ok := ctx.Value(tappedKey{}).(*tapped)
	if !ok || t.bearer == "" || t.bearer != tok {
		return auth.Verified{}, false
	}
	return t.token, true
}

// credentials returns a call's x-api-key and bearer token, each "" when
// absent or not given exactly once.
func credentials(md metadata.MD) (apiKey, bearer string) {
	if keys := md.Get("x-api-key"); len(keys) == 1 {
		return keys[0], ""
	}
	if authz := md.Get("authorization"); len(authz) == 1 && len(authz[0]) > 7 && strings.EqualFold(authz[0][:7], "bearer ") {
		return "", authz[0][7:]
	}
	return "", ""
}

// authenticated tells the call's slot, if Tap gave it one, the tenant the
// call authenticated as.
func authenticated(ctx context.Context, tenant string) {
	if t, ok := ctx.Value(tappedKey{}).(*tapped); ok {
		t.slot.Authenticated(tenant)
	}
}
