package ha

import (
	"strings"
	"testing"
	"time"
)

func TestNewValidatesConfig(t *testing.T) {
	const dsn = "postgres://localhost/repool"
	tests := []struct {
		name  string
		cfg   Config
		field string // named in the error; "" for a valid config
	}{
		{"defaults", Config{DSN: dsn}, ""},
		{"explicit", Config{DSN: dsn, Interval: time.Second, SessionTimeout: 3 * time.Second}, ""},
		{"no DSN", Config{}, "DSN"},
		{"negative interval", Config{DSN: dsn, Interval: -time.Millisecond}, "Interval"},
		{"negative session timeout", Config{DSN: dsn, SessionTimeout: -time.Second}, "SessionTimeout"},
		{"session timeout not above interval", Config{DSN: dsn, Interval: time.Second, SessionTimeout: time.Second}, "SessionTimeout"},
		{"interval above the default session timeout", Config{DSN: dsn, Interval: 5 * time.Second}, "Interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := New(tt.cfg)
			if tt.field == "" {
				if err != nil || e == nil {
					t.Fatalf("New(%+v) = got %v, %v, want an Elector, nil", tt.cfg, e, err)
				}
				if e.cfg.Interval <= 0 || e.cfg.SessionTimeout <= e.cfg.Interval {
					t.Errorf("New(%+v): Interval %v, SessionTimeout %v, want 0 < Interval < SessionTimeout", tt.cfg, e.cfg.Interval, e.cfg.SessionTimeout)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "Config."+tt.field) {
				t.Fatalf("New(%+v) = got error %v, want one naming Config.%s", tt.cfg, err, tt.field)
			}
		})
	}
}

// TestLockTimeout: a standby's wait for the lock lasts Interval, at most
// half of SessionTimeout (so that the answer has time to arrive within the
// attempt's bound), at most 500ms (below PostgreSQL's default
// deadlock_timeout) and at least 1ms (0 would disable lock_timeout).
func TestLockTimeout(t *testing.T) {
	const dsn = "postgres://localhost/repool"
	tests := []struct {
		interval, sessionTimeout, want time.Duration
	}{
		{0, 0, 250 * time.Millisecond},
		{20 * time.Millisecond, 5 * time.Second, 20 * time.Millisecond},
		{400 * time.Millisecond, 600 * time.Millisecond, 300 * time.Millisecond},
		{time.Second, 1500 * time.Millisecond, 500 * time.Millisecond},
		{2 * time.Second, 10 * time.Second, 500 * time.Millisecond},
		{100 * time.Microsecond, time.Second, time.Millisecond},
	}
	for _, tt := range tests {
		e, err := New(Config{DSN: dsn, Interval: tt.interval, SessionTimeout: tt.sessionTimeout})
		if err != nil {
			t.Fatalf("New(Interval %v, SessionTimeout %v) = got error %v, want nil", tt.interval, tt.sessionTimeout, err)
		}
		if got := e.lockTimeout(); got != tt.want || got >= e.cfg.SessionTimeout {
			t.Errorf("lockTimeout() with Interval %v, SessionTimeout %v = got %v, want %v (below SessionTimeout)", tt.interval, tt.sessionTimeout, got, tt.want)
		}
	}
}
