package token

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// compareAndDelete deletes KEYS[1] only if it still holds ARGV[1]: a
// sidecar that saw a token refused must not delete the fresh token another
// sidecar stored meanwhile.
var compareAndDelete = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
	return redis.call("DEL", KEYS[1])
end
return 0`)

// entry is a token as stored in Redis.
type entry struct {
	Token     string `json:"token"`
	IssuedAt  int64  `json:"issued_at_ms"`
	ExpiresAt int64  `json:"expires_at_ms"`
	Tenant    string `json:"tenant,omitempty"`
}

// shared is the Redis tier of one Source. Every operation is bounded by
// the configured timeout; failures are counted and logged once per change
// between reachable and unreachable, never returned to callers: the local
// cache and IssueToken serve alone while Redis is away.
type shared struct {
	client  *redis.Client
	key     string
	timeout time.Duration
	log     *slog.Logger
	errors  *prometheus.CounterVec // curried with the provider
	down    atomic.Bool
}

func newShared(cfg Redis, key string, log *slog.Logger, errs *prometheus.CounterVec) *shared {
	cfg = cfg.WithDefaults()
	return &shared{
		client: redis.NewClient(&redis.Options{
			Addr: cfg.Addr, Username: cfg.Username, Password: cfg.Password, DB: cfg.DB,
			DialTimeout: cfg.Timeout, ReadTimeout: cfg.Timeout, WriteTimeout: cfg.Timeout,
			ContextTimeoutEnabled: true,
			// Our own policy decides what to do when Redis fails: no hidden
			// retry loops underneath it.
			MaxRetries: -1, DialerRetries: 1,
			PoolSize: 4, DisableIdentity: true,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		}),
		key:     key,
		timeout: cfg.Timeout,
		log:     log,
		errors:  errs,
	}
}

// observe counts a failed operation and logs the changes of reachability.
func (r *shared) observe(op string, err error) {
	if err != nil && !errors.Is(err, redis.Nil) {
		r.errors.WithLabelValues(op).Inc()
		if !r.down.Swap(true) {
			r.log.Warn("redis token cache unreachable; serving tokens from the local cache", "op", op, "err", err)
		}
		return
	}
	if r.down.Swap(false) {
		r.log.Info("redis token cache reachable again")
	}
}

// get returns the stored token and its raw value, or nil if there is none
// (or Redis is unreachable, or the value is not ours).
func (r *shared) get(ctx context.Context) (*entry, string) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	raw, err := r.client.Get(ctx, r.key).Result()
	r.observe("get", err)
	if err != nil {
		return nil, ""
	}
	var e entry
	if err := json.Unmarshal([]byte(raw), &e); err != nil || e.Token == "" {
		r.log.Warn("ignoring a malformed token entry in redis", "key", r.key)
		return nil, ""
	}
	return &e, raw
}

// set stores e for ttl and returns its raw value.
func (r *shared) set(ctx context.Context, e entry, ttl time.Duration) string {
	raw, err := json.Marshal(e)
	if err != nil {
		panic(fmt.Sprintf("token: encoding a redis entry: %v", err)) // cannot fail for this type
	}
	if ttl <= 0 {
		return string(raw)
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	r.observe("set", r.client.Set(ctx, r.key, raw, ttl).Err())
	return string(raw)
}

// delete removes the entry if it still holds raw.
func (r *shared) delete(ctx context.Context, raw string) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	r.observe("delete", compareAndDelete.Run(ctx, r.client, []string{r.key}, raw).Err())
}

func (r *shared) close() error { return r.client.Close() }
