package dlock

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// DefaultStorePath returns the file of the embedded default store, the
// SQLite database that the dlock CLI uses when given no URL:
// $XDG_STATE_HOME/dlock/dlock.db when XDG_STATE_HOME is set to an absolute
// path, else ~/.local/state/dlock/dlock.db.
func DefaultStorePath() (string, error) {
	if x := strings.TrimSpace(os.Getenv("XDG_STATE_HOME")); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "dlock", "dlock.db"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	if !filepath.IsAbs(home) {
		return "", fmt.Errorf("home directory %q is not an absolute path", home)
	}
	return filepath.Join(home, ".local", "state", "dlock", "dlock.db"), nil
}

// SQLiteURL returns the dlock URL of the SQLite database file at the absolute
// path p: sqlite:///abs/path, with reserved characters escaped.
func SQLiteURL(p string) string {
	return (&url.URL{Scheme: "sqlite", Path: filepath.ToSlash(p)}).String()
}

// defaultDirMode is the mode of the default store's directory when it is
// created (the XDG base directory specification asks for 0700).
const defaultDirMode = 0o700

// OpenDefault opens the store the dlock CLI uses when given no --url: the
// URL in the DLOCK_URL environment variable if it is set, else the embedded
// default, the SQLite file at DefaultStorePath (whose directory it creates).
// A library and the CLI on the same host then share locks without
// configuration, and a deployment points both at a shared store by setting
// DLOCK_URL.
//
// The SQLite default is a lock store for the processes of one host. It
// needs the SQLite backend registered, by importing package sqldlock/sqlite
// (import _ "github.com/dlockhq/dlock/sqldlock/sqlite"); without it
// OpenDefault returns an error that says so.
func OpenDefault(ctx context.Context, opts ...Option) (*Client, error) {
	if u := strings.TrimSpace(os.Getenv("DLOCK_URL")); u != "" {
		return Open(ctx, u, opts...)
	}
	p, err := DefaultStorePath()
	if err != nil {
		return nil, fmt.Errorf("dlock: locating the default store: %w", err)
	}
	registry.RLock()
	_, ok := registry.m["sqlite"]
	registry.RUnlock()
	if !ok {
		return nil, fmt.Errorf("dlock: the default store is SQLite, and no backend registers sqlite: import _ \"github.com/dlockhq/dlock/sqldlock/sqlite\": %w", ErrUnsupported)
	}
	if err := os.MkdirAll(filepath.Dir(p), defaultDirMode); err != nil {
		return nil, fmt.Errorf("dlock: creating the default store's directory: %w", err)
	}
	return Open(ctx, SQLiteURL(p), opts...)
}
