package ratelimit

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/clock"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	register = repoolv1.PoolService_Register_FullMethodName
	acquire  = repoolv1.PoolService_Acquire_FullMethodName
)

// fakeBackend is a Backend whose behaviour the test supplies.
type fakeBackend struct {
	take   func(ctx context.Context, tenant string, cost int, now time.Time) (Decision, error)
	set    func(tenant string, rps float64, burst int, now time.Time) error
	forget func(tenant string)
}

var _ Backend = (*fakeBackend)(nil)

func (f *fakeBackend) Take(ctx context.Context, tenant string, cost int, now time.Time) (Decision, error) {
	return f.take(ctx, tenant, cost, now)
}

func (f *fakeBackend) Set(tenant string, rps float64, burst int, now time.Time) error {
	if f.set == nil {
		return nil
	}
	return f.set(tenant, rps, burst, now)
}

func (f *fakeBackend) Forget(tenant string) {
	if f.forget != nil {
		f.forget(tenant)
	}
}

// logRecord is one record a recorder received.
type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]any
}

// recorder is a slog.Handler that keeps every record.
type recorder struct {
	mu      *sync.Mutex
	records *[]logRecord
	attrs   []slog.Attr
}

func newRecorder() *recorder { return &recorder{mu: &sync.Mutex{}, records: &[]logRecord{}} }

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	lr := logRecord{level: rec.Level, msg: rec.Message, attrs: map[string]any{}}
	for _, a := range r.attrs {
		lr.attrs[a.Key] = a.Value.Any()
	}
	rec.Attrs(func(a slog.Attr) bool {
		lr.attrs[a.Key] = a.Value.Any()
		return true
	})
	r.mu.Lock()
	*r.records = append(*r.records, lr)
	r.mu.Unlock()
	return nil
}

func (r *recorder) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &recorder{mu: r.mu, records: r.records, attrs: append(r.attrs[:len(r.attrs):len(r.attrs)], attrs...)}
}

func (r *recorder) WithGroup(string) slog.Handler { return r }

func (r *recorder) all() []logRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]logRecord(nil), *r.records...)
}

func newTestLimiter(t testing.TB, cfg Config) (*Limiter, *clock.Fake) {
	t.Helper()
	fc := clock.NewFake(t0)
	if cfg.Clock == nil {
		cfg.Clock = fc
	}
	l, err := New(cfg)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	return l, fc
}

func mustAllow(t testing.TB, l *Limiter, tenant, method string) {
	t.Helper()
	if d, err := l.Allow(context.Background(), tenant, method); err != nil || !d.Allowed {
		t.Fatalf("Allow(%s, %s) = got %+v, %v, want allowed", tenant, method, d, err)
	}
}

// wantRefused checks that Allow refuses with reason and retryAfter.
func wantRefused(t testing.TB, l *Limiter, tenant, method string, reason Reason, retryAfter time.Duration) {
	t.Helper()
	d, err := l.Allow(context.Background(), tenant, method)
	if !errors.Is(err, ErrLimited) || d.Allowed || d.Reason != reason || d.RetryAfter != retryAfter {
		t.Fatalf("Allow(%s, %s) = got %+v, %v, want refused (%v) with retry-after %v",
			tenant, method, d, err, reason, retryAfter)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr bool
	}{
		{name: "zero means defaults", cfg: Config{}},
		{name: "unlimited rate", cfg: Config{Rate: math.Inf(1)}},
		{name: "explicit", cfg: Config{Rate: 0.5, Burst: 1, Costs: map[string]int{}, DefaultCost: 2}},
		{name: "negative rate", cfg: Config{Rate: -1}, wantErr: true},
		{name: "NaN rate", cfg: Config{Rate: math.NaN()}, wantErr: true},
		{name: "negative burst", cfg: Config{Burst: -1}, wantErr: true},
		{name: "zero cost", cfg: Config{Costs: map[string]int{register: 0}}, wantErr: true},
		{name: "negative default cost", cfg: Config{DefaultCost: -1}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if (err != nil) != tt.wantErr || (err != nil && !errors.Is(err, ErrInvalidArgument)) {
				t.Fatalf("Validate() = got %v, want error %v", err, tt.wantErr)
			}
			if _, err := New(tt.cfg); (err != nil) != tt.wantErr {
				t.Fatalf("New() = got %v, want error %v", err, tt.wantErr)
			}
		})
	}
}

func TestBurstThenRetryAfter(t *testing.T) {
	tests := []struct {
		name      string
		cfg       Config
		method    string
		allowed   int           // requests that pass at once
		wantRetry time.Duration // retry-after of the next one
	}{
		{name: "defaults", method: acquire, allowed: 50, wantRetry: 100 * time.Millisecond},
		{name: "cost 5 at defaults", method: register, allowed: 10, wantRetry: 500 * time.Millisecond},
		{name: "slow rate", cfg: Config{Rate: 0.5, Burst: 2}, method: acquire, allowed: 2, wantRetry: 2 * time.Second},
		{name: "fractional rate", cfg: Config{Rate: 3, Burst: 1}, method: acquire, allowed: 1, wantRetry: 333333334 * time.Nanosecond},
		{name: "cost not a divisor of the burst",
			cfg: Config{Rate: 4, Burst: 10, Costs: map[string]int{register: 3}}, method: register,
			allowed: 3, wantRetry: 500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, fc := newTestLimiter(t, tt.cfg)
			for range tt.allowed {
				mustAllow(t, l, "a", tt.method)
			}
			wantRefused(t, l, "a", tt.method, ReasonRateLimited, tt.wantRetry)
			// A moment too early is still refused; at the retry-after it passes.
			fc.Advance(tt.wantRetry - time.Millisecond)
			if d, err := l.Allow(context.Background(), "a", tt.method); d.Allowed || !errors.Is(err, ErrLimited) {
				t.Fatalf("Allow() 1ms before the retry-after = got %+v, %v, want refused", d, err)
			}
			fc.Advance(time.Millisecond)
			mustAllow(t, l, "a", tt.method)
			// Other tenants have their own buckets.
			mustAllow(t, l, "b", tt.method)
		})
	}
}

func TestRetryAfterMessage(t *testing.T) {
	l, _ := newTestLimiter(t, Config{Rate: 1, Burst: 1})
	mustAllow(t, l, "a", acquire)
	_, err := l.Allow(context.Background(), "a", acquire)
	want := "rate limited: /repool.v1.PoolService/Acquire costs 1 tokens; retry after 1s"
	if err == nil || err.Error() != want {
		t.Fatalf("Allow() error = got %v, want %q", err, want)
	}
}

func TestCosts(t *testing.T) {
	l, _ := newTestLimiter(t, Config{Costs: map[string]int{register: 7}, DefaultCost: 2})
	tests := []struct {
		method string
		want   int
	}{
		{method: register, want: 7},
		{method: acquire, want: 2},
		{method: "", want: 2},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			if got := l.Cost(tt.method); got != tt.want {
				t.Fatalf("Cost(%q) = got %d, want %d", tt.method, got, tt.want)
			}
		})
	}
	// 50 tokens: seven registers (49) leave one token, less than an acquire.
	for range 7 {
		mustAllow(t, l, "a", register)
	}
	wantRefused(t, l, "a", acquire, ReasonRateLimited, 100*time.Millisecond)

	def, err := New(Config{})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	if got := def.Cost(register); got != 5 {
		t.Errorf("Cost(Register) with default costs = got %d, want 5", got)
	}
}

func TestCostExceedsBurst(t *testing.T) {
	l, _ := newTestLimiter(t, Config{})
	if err := l.Set("a", 10, 3); err != nil {
		t.Fatalf("Set() = %v", err)
	}
	wantRefused(t, l, "a", register, ReasonCostExceedsBurst, 0)
	_, err := l.Allow(context.Background(), "a", register)
	want := "rate limited: /repool.v1.PoolService/Register costs 5 tokens, more than the tenant's burst: it cannot pass until the limit is raised"
	if err == nil || err.Error() != want {
		t.Fatalf("Allow() error = got %v, want %q", err, want)
	}
	// The refusals spent nothing.
	for range 3 {
		mustAllow(t, l, "a", acquire)
	}
}

func TestSetLive(t *testing.T) {
	tests := []struct {
		name      string
		spend     int // acquires before Set
		rps       float64
		burst     int
		wantPass  int // acquires that pass right after Set
		wantRetry time.Duration
	}{
		{name: "slower keeps tokens", spend: 30, rps: 1, burst: 100, wantPass: 20, wantRetry: time.Second},
		{name: "smaller burst caps tokens", spend: 10, rps: 10, burst: 5, wantPass: 5, wantRetry: 100 * time.Millisecond},
		{name: "faster keeps tokens", spend: 50, rps: 1000, burst: 0, wantPass: 0, wantRetry: time.Millisecond},
		{name: "zero restores defaults", spend: 45, rps: 0, burst: 0, wantPass: 5, wantRetry: 100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, _ := newTestLimiter(t, Config{})
			if err := l.Set("a", 2, 50); err != nil {
				t.Fatalf("Set(a, 2, 50) = %v", err)
			}
			for range tt.spend {
				mustAllow(t, l, "a", acquire)
			}
			if err := l.Set("a", tt.rps, tt.burst); err != nil {
				t.Fatalf("Set(a, %v, %d) = %v", tt.rps, tt.burst, err)
			}
			for range tt.wantPass {
				mustAllow(t, l, "a", acquire)
			}
			wantRefused(t, l, "a", acquire, ReasonRateLimited, tt.wantRetry)
		})
	}
}

func TestSetBeforeFirstRequest(t *testing.T) {
	l, fc := newTestLimiter(t, Config{})
	if err := l.Set("a", 1, 2); err != nil {
		t.Fatalf("Set(a, 1, 2) = %v", err)
	}
	mustAllow(t, l, "a", acquire)
	mustAllow(t, l, "a", acquire)
	wantRefused(t, l, "a", acquire, ReasonRateLimited, time.Second)
	fc.Advance(time.Second)
	mustAllow(t, l, "a", acquire)
}

func TestSetInvalid(t *testing.T) {
	l, _ := newTestLimiter(t, Config{})
	tests := []struct {
		name   string
		tenant string
		rps    float64
		burst  int
	}{
		{name: "empty tenant", rps: 1, burst: 1},
		{name: "negative rate", tenant: "a", rps: -1, burst: 1},
		{name: "NaN rate", tenant: "a", rps: math.NaN(), burst: 1},
		{name: "negative burst", tenant: "a", rps: 1, burst: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := l.Set(tt.tenant, tt.rps, tt.burst); !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("Set(%q, %v, %d) = got %v, want ErrInvalidArgument", tt.tenant, tt.rps, tt.burst, err)
			}
		})
	}
	// Nothing changed: the default bucket is intact.
	for range DefaultBurst {
		mustAllow(t, l, "a", acquire)
	}
}

func TestSetBackendError(t *testing.T) {
	boom := errors.New("boom")
	l, _ := newTestLimiter(t, Config{Backend: &fakeBackend{
		set: func(string, float64, int, time.Time) error { return boom },
	}})
	if err := l.Set("a", 1, 1); !errors.Is(err, ErrBackend) || !errors.Is(err, boom) {
		t.Fatalf("Set() = got %v, want ErrBackend wrapping the backend's error", err)
	}
}

func TestEmptyTenant(t *testing.T) {
	l, _ := newTestLimiter(t, Config{})
	if _, err := l.Allow(context.Background(), "", acquire); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Allow(\"\", Acquire) = got %v, want ErrInvalidArgument", err)
	}
}

func TestFailOpen(t *testing.T) {
	boom := errors.New("redis: connection refused")
	rec := newRecorder()
	reg := prometheus.NewPedanticRegistry()
	l, fc := newTestLimiter(t, Config{
		Backend: &fakeBackend{take: func(context.Context, string, int, time.Time) (Decision, error) {
			return Decision{}, boom
		}},
		Logger:           slog.New(rec),
		ErrorLogInterval: 10 * time.Second,
		Registerer:       reg,
	})

	d, err := l.Allow(context.Background(), "a", register)
	if want := (Decision{Allowed: true, Reason: ReasonFailedOpen, Cost: 5}); err != nil || d != want {
		t.Fatalf("Allow() with a failing backend = got %+v, %v, want %+v, nil", d, err, want)
	}
	fc.Advance(time.Second)
	mustAllow(t, l, "a", acquire) // counted, not logged: too soon
	mustAllow(t, l, "b", acquire)
	fc.Advance(10 * time.Second)
	mustAllow(t, l, "b", acquire) // logged, with the two suppressed

	counts := []struct {
		tenant string
		want   float64
	}{{"a", 2}, {"b", 2}}
	for _, c := range counts {
		if got := testutil.ToFloat64(l.faults.WithLabelValues(c.tenant)); got != c.want {
			t.Errorf("repool_ratelimit_errors_total{tenant=%q} = got %v, want %v", c.tenant, got, c.want)
		}
	}
	if got := testutil.CollectAndCount(l.rejected); got != 0 {
		t.Errorf("repool_ratelimit_rejected_total series = got %d, want 0: faults are not rejections", got)
	}
	if n, err := testutil.GatherAndCount(reg, "repool_ratelimit_errors_total"); err != nil || n != 2 {
		t.Errorf("GatherAndCount(repool_ratelimit_errors_total) = got %d, %v, want 2 series", n, err)
	}

	logs := rec.all()
	if len(logs) != 2 {
		t.Fatalf("log records = got %d (%+v), want 2", len(logs), logs)
	}
	wantAttrs := []map[string]any{
		{"component": "ratelimit", "tenant": "a", "method": register, "suppressed": int64(0)},
		{"component": "ratelimit", "tenant": "b", "method": acquire, "suppressed": int64(2)},
	}
	for i, lr := range logs {
		if lr.level != slog.LevelError {
			t.Errorf("record %d level = got %v, want ERROR", i, lr.level)
		}
		for k, want := range wantAttrs[i] {
			if got := lr.attrs[k]; got != want {
				t.Errorf("record %d attribute %s = got %v, want %v", i, k, got, want)
			}
		}
		if got, _ := lr.attrs["err"].(error); !errors.Is(got, boom) {
			t.Errorf("record %d attribute err = got %v, want %v", i, lr.attrs["err"], boom)
		}
	}
}

func TestFailOpenEveryFaultLogged(t *testing.T) {
	rec := newRecorder()
	l, _ := newTestLimiter(t, Config{
		Backend: &fakeBackend{take: func(context.Context, string, int, time.Time) (Decision, error) {
			return Decision{}, errors.New("down")
		}},
		Logger:           slog.New(rec),
		ErrorLogInterval: -1,
	})
	for range 3 {
		mustAllow(t, l, "a", acquire)
	}
	if got := len(rec.all()); got != 3 {
		t.Fatalf("log records = got %d, want 3", got)
	}
}

func TestCancelledCallerIsNotAFault(t *testing.T) {
	rec := newRecorder()
	l, _ := newTestLimiter(t, Config{
		Backend: &fakeBackend{take: func(ctx context.Context, _ string, _ int, _ time.Time) (Decision, error) {
			return Decision{}, ctx.Err()
		}},
		Logger: slog.New(rec),
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if d, err := l.Allow(ctx, "a", acquire); !errors.Is(err, context.Canceled) || d.Allowed {
		t.Fatalf("Allow(cancelled) = got %+v, %v, want context.Canceled", d, err)
	}
	if got := testutil.CollectAndCount(l.faults); got != 0 {
		t.Errorf("repool_ratelimit_errors_total series = got %d, want 0", got)
	}
	if got := len(rec.all()); got != 0 {
		t.Errorf("log records = got %d, want 0", got)
	}
}

func TestRejectedCounted(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	l, _ := newTestLimiter(t, Config{Rate: 1, Burst: 1, Registerer: reg})
	mustAllow(t, l, "a", acquire)
	for range 3 {
		wantRefused(t, l, "a", acquire, ReasonRateLimited, time.Second)
	}
	if got := testutil.ToFloat64(l.rejected.WithLabelValues("a")); got != 3 {
		t.Errorf("repool_ratelimit_rejected_total{tenant=a} = got %v, want 3", got)
	}
	if got := testutil.CollectAndCount(l.faults); got != 0 {
		t.Errorf("repool_ratelimit_errors_total series = got %d, want 0", got)
	}
	if n, err := testutil.GatherAndCount(reg, "repool_ratelimit_rejected_total"); err != nil || n != 1 {
		t.Errorf("GatherAndCount(rejected) = got %d, %v, want 1 series", n, err)
	}
}

func TestRegistererConflict(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(Config{Registerer: reg}); err != nil {
		t.Fatalf("New() = %v", err)
	}
	if _, err := New(Config{Registerer: reg}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("New() on the same registry = got %v, want ErrInvalidArgument", err)
	}
}

func TestForget(t *testing.T) {
	l, _ := newTestLimiter(t, Config{})
	if err := l.Set("a", 1, 1); err != nil {
		t.Fatalf("Set() = %v", err)
	}
	// Set makes the tenant's counters, at 0, before any refusal.
	if rej, faults := testutil.CollectAndCount(l.rejected), testutil.CollectAndCount(l.faults); rej != 1 || faults != 1 {
		t.Errorf("series after Set = got %d rejected, %d errors; want 1 each", rej, faults)
	}
	mustAllow(t, l, "a", acquire)
	wantRefused(t, l, "a", acquire, ReasonRateLimited, time.Second)
	l.Forget("a")
	if got := testutil.CollectAndCount(l.rejected) + testutil.CollectAndCount(l.faults); got != 0 {
		t.Errorf("repool_ratelimit_rejected_total and _errors_total series after Forget = got %d, want 0", got)
	}
	// A full bucket at the defaults.
	for range DefaultBurst {
		mustAllow(t, l, "a", acquire)
	}
	wantRefused(t, l, "a", acquire, ReasonRateLimited, 100*time.Millisecond)
}

// TestZeroAllocs holds the design: an allowed request allocates nothing.
func TestZeroAllocs(t *testing.T) {
	l, err := New(Config{Rate: math.Inf(1)})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	limited, err := New(Config{Rate: 1e12, Burst: 1 << 30})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	tests := []struct {
		name string
		l    *Limiter
	}{
		{name: "unlimited", l: l},
		{name: "bucket", l: limited},
	}
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mustAllow(t, tt.l, "a", register) // creates the bucket
			got := testing.AllocsPerRun(1000, func() {
				if d, err := tt.l.Allow(ctx, "a", register); err != nil || !d.Allowed {
					t.Fatalf("Allow() = %+v, %v", d, err)
				}
			})
			if got != 0 {
				t.Fatalf("Allow() allocations = got %v, want 0", got)
			}
		})
	}
}
