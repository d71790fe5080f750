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
