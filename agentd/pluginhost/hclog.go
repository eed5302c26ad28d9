package pluginhost

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// hclogAdapter lets go-plugin log through slog. Everything go-plugin says,
// including the plugin's own stderr, is forwarded at debug level: it is
// plumbing, and job output travels as log events instead.
type hclogAdapter struct {
	l       *slog.Logger
	name    string
	implied []any
}

var _ hclog.Logger = (*hclogAdapter)(nil)

func newHCLog(l *slog.Logger, name string) *hclogAdapter {
	return &hclogAdapter{l: l, name: name}
}

func (a *hclogAdapter) Log(_ hclog.Level, msg string, args ...any) {
	a.l.Debug(msg, append([]any{"logger", a.name}, args...)...)
}

func (a *hclogAdapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }
func (a *hclogAdapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }
func (a *hclogAdapter) Info(msg string, args ...any)  { a.Log(hclog.Info, msg, args...) }
func (a *hclogAdapter) Warn(msg string, args ...any)  { a.Log(hclog.Warn, msg, args...) }
func (a *hclogAdapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }

func (a *hclogAdapter) enabled() bool { return a.l.Enabled(context.Background(), slog.LevelDebug) }

func (a *hclogAdapter) IsTrace() bool { return false }
func (a *hclogAdapter) IsDebug() bool { return a.enabled() }
func (a *hclogAdapter) IsInfo() bool  { return a.enabled() }
func (a *hclogAdapter) IsWarn() bool  { return a.enabled() }
func (a *hclogAdapter) IsError() bool { return a.enabled() }

func (a *hclogAdapter) ImpliedArgs() []any { return a.implied }

func (a *hclogAdapter) With(args ...any) hclog.Logger {
	return &hclogAdapter{l: a.l.With(args...), name: a.name, implied: append(append([]any(nil), a.implied...), args...)}
}

func (a *hclogAdapter) Name() string { return a.name }

func (a *hclogAdapter) Named(name string) hclog.Logger {
	if a.name != "" {
		name = a.name + "." + name
	}
	return &hclogAdapter{l: a.l, name: name, implied: a.implied}
}

func (a *hclogAdapter) ResetNamed(name string) hclog.Logger {
	return &hclogAdapter{l: a.l, name: name, implied: a.implied}
}

// SetLevel does nothing: the slog handler decides what is kept.
func (a *hclogAdapter) SetLevel(hclog.Level) {}

func (a *hclogAdapter) GetLevel() hclog.Level {
	if a.enabled() {
		return hclog.Debug
	}
	return hclog.Off
}

func (a *hclogAdapter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(a.StandardWriter(opts), "", 0)
}

func (a *hclogAdapter) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		a.Debug(string(bytes.TrimRight(p, "\n")))
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
