package redact

import (
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://app:s3cret@db:5432/app", "postgres://app:xxxxx@db:5432/app"},
		{"postgres://db/app?password=s3cret&sslmode=disable", "postgres://db/app?password=xxxxx&sslmode=disable"},
		{"redis+sentinel://h:26379/mymaster?sentinel_password=s3cret&db=1", "redis+sentinel://h:26379/mymaster?sentinel_password=xxxxx&db=1"},
		{"etcd://h?client_secret=s3cret&TOKEN=s3cret&sslkey=s3cret&keyfile=s3cret", "etcd://h?client_secret=xxxxx&TOKEN=xxxxx&sslkey=xxxxx&keyfile=xxxxx"},
		{"mysql://u:p%40ss@h/db?api%5Fkey=s3cret", "mysql://u:xxxxx@h/db?api%5Fkey=xxxxx"},
		{"sqlite:///var/lib/x.db?busy_timeout=5s", "sqlite:///var/lib/x.db?busy_timeout=5s"},
		{"postgres://u:s3cret@h:bad port/x?password=s3cret", "xxxxx@h:bad port/x?password=xxxxx"},
		{"postgres://u:s3cret%zz", "(unparsable URL)"},
		{"zk://127.0.0.1:2181,:x", "zk://127.0.0.1:2181,:x"},
		{"redis://h:bad/?password=s3cret", "redis://h:bad/?password=xxxxx"},
		{"host=db password=s3cret sslmode=disable", "host=db password=xxxxx sslmode=disable"},
		{"host=db password='s3 cret' user=app", "host=db password=xxxxx user=app"},
	} {
		got := String(tc.in)
		if got != tc.want {
			t.Errorf("String(%q) = %q; want %q", tc.in, got, tc.want)
		}
		if strings.Contains(got, "s3cret") {
			t.Errorf("String(%q) = %q shows the secret", tc.in, got)
		}
	}
}

func TestSecret(t *testing.T) {
	for name, want := range map[string]bool{
		"password": true, "sentinel_password": true, "Secret": true, "token": true, "sslkey": true,
		"db": false, "sslmode": false, "prefix": false, "mode": false, "ttl": false,
	} {
		if got := Secret(name); got != want {
			t.Errorf("Secret(%q) = %v; want %v", name, got, want)
		}
	}
}
