package mysqlsupport

import (
	"errors"
	"net/url"
	"strings"
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

func TestMySQLURL(t *testing.T) {
	cfg, err := mysqlConfig(parse(t, "mysql://app:p%40ss%2Fw@db.example:3307/orders?timeout=5s&tls=false"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.User != "app" || cfg.Passwd != "p@ss/w" || cfg.Net != "tcp" || cfg.Addr != "db.example:3307" || cfg.DBName != "orders" ||
		!cfg.ParseTime || !cfg.ClientFoundRows || cfg.Timeout != 5*time.Second {
		t.Errorf("config = %+v", cfg)
	}
	if got := cfg.FormatDSN(); !strings.HasPrefix(got, "app:p@ss/w@tcp(db.example:3307)/orders?") || !strings.Contains(got, "parseTime=true") {
		t.Errorf("DSN = %q", got)
	}
	cfg, err = mysqlConfig(parse(t, "mysql://root@[::1]/app?parseTime=false"))
	if err != nil || cfg.Addr != "[::1]:3306" || cfg.ParseTime || cfg.User != "root" || cfg.Passwd != "" || cfg.Timeout != DefaultConnectTimeout {
		t.Errorf("config = %+v, %v; want [::1]:3306, parseTime as given, the default timeout", cfg, err)
	}
	for _, raw := range []string{"mysql://u@h/a/b", "mysql:opaque", "mysql://u@h/db?timeout=forever"} {
		if _, err := mysqlConfig(parse(t, raw)); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%s: err = %v; want ErrInvalidArgument", raw, err)
		}
	}
}
