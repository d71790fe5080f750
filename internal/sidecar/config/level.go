package config

import "log/slog"

// Level returns the slog level of LogLevel (info if it does not parse;
// Validate reports that).
func (c Config) Level() slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(c.WithDefaults().LogLevel)); err != nil {
		return slog.LevelInfo
	}
	return l
}
