package app

import "log/slog"

// ParseLevel maps LSP_LOG_LEVEL to a slog level (info when unknown).
func ParseLevel(s string) slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return slog.LevelInfo
	}
	return l
}
