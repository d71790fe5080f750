package control

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/repool/repool/internal/auth"
	"github.com/repool/repool/internal/store"
)

// createKeyRequest is the body of POST /api/v1/tenants/{id}/keys.
type createKeyRequest struct {
	Name string `json:"name"`
}

// createdKeyJSON answers POST .../keys: the only response that ever holds
// the plain key.
type createdKeyJSON struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Prefix    string    `json:"prefix"`
	Key       string    `json:"key"`
	CreatedAt time.Time `json:"created_at"`
}

// keyJSON is a key in listings: never the plain key nor its digest.
// RevokedAt is null while the key is valid.
type keyJSON struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Prefix    string     `json:"prefix"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at"`
}

// newKeyID returns a random key id: "key_" and 26 base32 characters.
func newKeyID() string {
	return "key_" + strings.ToLower(rand.Text())
}

// issueKey makes a new API key for tenant and stores its metadata and
// digest. It returns the stored key and the plain key, which the caller
// shows once and never logs. Store errors are returned as they are.
func issueKey(ctx context.Context, st store.Store, tenant, name string) (store.Key, string, error) {
	plain, prefix, digest, err := auth.NewKey(nil)
	if err != nil {
		return store.Key{}, "", err
	}
	k, err := st.CreateKey(ctx, store.Key{ID: newKeyID(), TenantID: tenant, Name: name, Prefix: prefix, Digest: digest})
	if err != nil {
		return store.Key{}, "", err
	}
	return k, plain, nil
}

// createKey serves POST /api/v1/tenants/{id}/keys: 201 with the plain key,
// shown this once.
func (a *API) createKey(w http.ResponseWriter, r *http.Request, c caller) error {
	id, err := tenantID(r)
	if err != nil {
		return err
	}
	var req createKeyRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	if err := checkName("name", req.Name); err != nil {
		return err
	}
	// Counting and creating under the lifecycle lock keeps concurrent
	// requests to this server under the cap; only the active server takes
	// changes.
	ctx := r.Context()
	unlock, err := a.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	ks, err := a.cfg.Store.ListKeys(ctx, id)
	if err != nil {
		return fromStore(err, "tenant "+strconv.Quote(id))
	}
	active := 0
	for _, k := range ks {
		if !k.Revoked() {
			active++
		}
	}
	if active >= a.cfg.MaxKeysPerTenant {
		return &apiError{http.StatusConflict, codeResourceExhausted, fmt.Sprintf(
			"tenant %q has %d API keys that are not revoked, the most allowed; revoke one first", id, active)}
	}
	k, plain, err := issueKey(ctx, a.cfg.Store, id, req.Name)
	if errors.Is(err, store.ErrExists) {
		// A random id or digest collided: not the client's doing.
		return fmt.Errorf("issue key: %w", err)
	}
	if err != nil {
		return fromStore(err, "tenant "+strconv.Quote(id))
	}
	a.audit(ctx, c, id, actionKeyCreate, k.ID, keyDetail(k))
	w.Header().Set("Location", "/api/v1/tenants/"+id+"/keys/"+k.ID)
	writeJSON(w, http.StatusCreated, createdKeyJSON{k.ID, k.Name, k.Prefix, plain, k.CreatedAt})
	return nil
}

// listKeys serves GET /api/v1/tenants/{id}/keys: {"keys":[...]}, oldest
// first, revoked keys included.
func (a *API) listKeys(w http.ResponseWriter, r *http.Request, _ caller) error {
	id, err := tenantID(r)
	if err != nil {
		return err
	}
	ks, err := a.cfg.Store.ListKeys(r.Context(), id)
	if err != nil {
		return fromStore(err, "tenant "+strconv.Quote(id))
	}
	out := struct {
		Keys []keyJSON `json:"keys"`
	}{make([]keyJSON, 0, len(ks))}
	for _, k := range ks {
		kj := keyJSON{ID: k.ID, Name: k.Name, Prefix: k.Prefix, CreatedAt: k.CreatedAt}
		if k.Revoked() {
			kj.RevokedAt = &k.RevokedAt
		}
		out.Keys = append(out.Keys, kj)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// revokeKey serves DELETE /api/v1/tenants/{id}/keys/{keyID}: 204, also for
// a key revoked before (recorded in the audit trail only the first time).
// Hooks.KeyRevoked runs after the store change.
func (a *API) revokeKey(w http.ResponseWriter, r *http.Request, c caller) error {
	id, err := tenantID(r)
	if err != nil {
		return err
	}
	keyID := r.PathValue("keyID")
	if store.ValidateKeyID(keyID) != nil {
		return invalidArgument("key id %s is invalid: want 1-%d characters from [A-Za-z0-9_-]", shortQuote(keyID), store.MaxIDLen)
	}
	ctx := r.Context()
	what := fmt.Sprintf("key %q of tenant %q", keyID, id)
	k, err := a.cfg.Store.GetKey(ctx, id, keyID)
	if err != nil {
		return fromStore(err, what)
	}
	if err := a.cfg.Store.RevokeKey(ctx, id, keyID); err != nil {
		return fromStore(err, what)
	}
	a.cfg.Hooks.KeyRevoked(id, keyID)
	if !k.Revoked() {
		a.audit(ctx, c, id, actionKeyRevoke, keyID, keyDetail(k))
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
