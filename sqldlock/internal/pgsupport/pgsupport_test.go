package pgsupport

import (
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
)

func parse(t *testing.T, raw string) (*url.URL, url.Values) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u, u.Query()
}

func TestPostgresURL(t *testing.T) {
	cfg, err := pgConfig(parse(t, "postgresql://app:pw@db.example:5433/orders?sslmode=disable&application_name=worker"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "db.example" || cfg.Port != 5433 || cfg.Database != "orders" || cfg.User != "app" || cfg.Password != "pw" ||
		cfg.RuntimeParams["application_name"] != "worker" || cfg.ConnectTimeout != DefaultConnectTimeout {
		t.Errorf("config = %+v %v", cfg.Config, cfg.RuntimeParams)
	}
	if cfg, err := pgConfig(parse(t, "postgres://h/db?connect_timeout=2")); err != nil {
		t.Errorf("connect_timeout=2: %v", err)
	} else if cfg.ConnectTimeout != 2*time.Second {
		t.Errorf("connect_timeout=2: %v; want 2s", cfg.ConnectTimeout)
	}
	if _, err := pgConfig(parse(t, "postgres://h/db?sslmode=bogus")); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("bad sslmode: err = %v; want ErrInvalidArgument", err)
	}
}
