package servercmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/repool/repool/internal/cli"
	"github.com/repool/repool/internal/control"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/open"
	"github.com/repool/repool/internal/token"
)

const adminTokenUsage = `usage: ` + Prog + ` admin-token --role ROLE [--tenant ID] [--ttl DURATION] [--store URL | --config FILE]

Print a control-plane bearer token (on stdout; its role and expiry on
stderr), signed with the signing key of the server's store, which it finds
as "` + Prog + ` run" does (--store, REPOOL_STORE, the --config file, the
default). It reads the store and changes nothing: it works beside the
running server, and refuses a store, a signing key or a tenant that the
server has not made.
`

// tenantsShown bounds the tenant ids an unknown --tenant's error lists.
const tenantsShown = 20

// adminToken is "server admin-token": it mints a control-plane token with
// the signing key of the server's store. Its own flags are checked before
// the store is looked at.
func adminToken(ctx context.Context, args []string, env Env) error {
	fs := flag.NewFlagSet(Prog+" admin-token", flag.ContinueOnError)
	fs.Usage = cli.Usage(fs, adminTokenUsage)
	role := fs.String("role", "", "token `role`: "+control.RoleOperator+", "+control.RoleTenantAdmin+", "+control.RoleTenantViewer+" or "+control.RoleMetrics+" (required)")
	tenant := fs.String("tenant", "", "`id` of the tenant a "+control.RoleTenantAdmin+" or "+control.RoleTenantViewer+" token acts on")
	ttl := fs.Duration("ttl", time.Hour, "token lifetime")
	var storeURL string
	err := cli.Parse(fs, env.Stdout, env.Stderr, func() error {
		var err error
		storeURL, err = LoadStore(fs, args, env.Getenv)
		return err
	})
	if err != nil {
		return err
	}
	if err := checkTokenFlags(*role, *tenant, *ttl); err != nil {
		return err
	}
	st, err := openServerStore(ctx, storeURL)
	if err != nil {
		return err
	}
	defer st.Close()
	if *tenant != "" {
		if err := checkTenant(ctx, st, *tenant); err != nil {
			return err
		}
	}
	key, err := st.SigningKey(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("the store has no signing key: no server has started on it yet (%v)", err)
	}
	if err != nil {
		return err
	}
	signer, err := token.NewSigner(key, nil)
	if err != nil {
		return err
	}
	tok, exp, err := control.MintToken(signer, *role, *tenant, *ttl)
	if err != nil {
		return err
	}
	fmt.Fprintln(env.Stdout, tok)
	fmt.Fprintf(env.Stderr, "role %s, expires %s\n", *role, exp.Format(time.RFC3339))
	return nil
}

// checkTokenFlags checks --role, --tenant and --ttl, in the flags' terms.
func checkTokenFlags(role, tenant string, ttl time.Duration) error {
	roles := control.RoleOperator + ", " + control.RoleTenantAdmin + ", " + control.RoleTenantViewer + " or " + control.RoleMetrics
	switch role {
	case "":
		return fmt.Errorf("--role is required: %s", roles)
	case control.RoleOperator, control.RoleMetrics:
		if tenant != "" {
			return fmt.Errorf("--role %s is not for one tenant and takes no --tenant (got --tenant %q)", role, tenant)
		}
	case control.RoleTenantAdmin, control.RoleTenantViewer:
		if tenant == "" {
			return fmt.Errorf("--role %s needs --tenant ID, the tenant it acts on", role)
		}
		if store.ValidateTenantID(tenant) != nil {
			return fmt.Errorf("--tenant %q: want 1-%d characters, [a-z0-9] first, then [a-z0-9_-]", tenant, store.MaxIDLen)
		}
	default:
		return fmt.Errorf("--role %q: want %s", role, roles)
	}
	if ttl <= 0 {
		return fmt.Errorf("--ttl %v: want a positive duration, such as 1h", ttl)
	}
	return nil
}

// openServerStore opens, read-only, a store that a server has made: a
// new store would hold a new key, and the server would refuse the token.
func openServerStore(ctx context.Context, url string) (store.Store, error) {
	u, err := open.ParseURL(url)
	if err != nil {
		return nil, err
	}
	switch u.Kind {
	case open.SQLiteMemory:
		return nil, fmt.Errorf("store %s is private to one process; name the server's store (--store, REPOOL_STORE or --config)", url)
	case open.SQLiteFile:
		if _, err := os.Stat(u.Path); errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("no store at %s; start the server first, or name its store (--store, REPOOL_STORE or --config)", u.Path)
		} else if err != nil {
			return nil, err
		}
	}
	return u.Open(ctx, store.Options{ReadOnly: true})
}

// checkTenant refuses a tenant that does not exist or was deleted, and
// names the ones that do.
func checkTenant(ctx context.Context, st store.Store, id string) error {
	t, err := st.GetTenant(ctx, id)
	switch {
	case err == nil && t.Status != store.StatusDeleted:
		return nil
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return err
	}
	why := "no such tenant"
	if err == nil {
		why = "the tenant was deleted"
	}
	ts, err := st.ListTenants(ctx, store.TenantFilter{})
	if err != nil {
		return err
	}
	var ids []string
	for _, t := range ts[:min(len(ts), tenantsShown)] {
		ids = append(ids, t.ID)
	}
	known := "the store has no tenant"
	if len(ids) > 0 {
		known = "the store's tenants: " + strings.Join(ids, ", ")
		if more := len(ts) - len(ids); more > 0 {
			known += fmt.Sprintf(" and %d more", more)
		}
	}
	return fmt.Errorf("--tenant %q: %s; %s (a running server lists them too: GET /api/v1/tenants with a token from \"%s admin-token --role %s\")",
		id, why, known, Prog, control.RoleOperator)
}
