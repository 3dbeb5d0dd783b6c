package cli_test

import (
	"context"
	"flag"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
)

// FuzzOpenURL gives every URL opener hostile URLs: dlock.Open must return
// (with an error or a Client that closes), never panic, and never show a
// password in its error. Every host is rewritten to a closed loopback port,
// so no opener reaches a server, and the context ends after 200ms; a SQLite
// path is put in a temporary directory. Options that name other addresses
// (PostgreSQL's host=, say) could still send an opener elsewhere, so the
// fuzzer proper runs only in a network namespace with nothing but loopback
// (.ci/run uses unshare); the seed URLs run everywhere.
func FuzzOpenURL(f *testing.F) {
	for _, s := range []string{
		"redis://u:s3cret-pw@h:6379/0?client=goredis&mode=tx",
		"rediss://h?cacert=/nonexistent&servername=x&dial_timeout=1s",
		"redis+sentinel://:s3cret-pw@h1,h2/mymaster?wait_replicas=1",
		"redis+cluster://h1,h2?client=go-redis&mode=legacy",
		"redlock://h1,h2,h3?prefix=x&client=hiredis&quorum=2",
		"etcd://user:s3cret-pw@h:2379/prefix?session=5s&cacert=x",
		"zk://h:2181/locks?curator=rwlock&session=1s",
		"postgres://u:s3cret-pw@h:5432/db?sslmode=verify-full&table=t",
		"mysql://u:s3cret-pw@h/db?cacert=x&table=%00",
		"memcached://h:11211?prefix=%ff",
		"sqlite:///x.db?table=locks&busy_timeout=-1s",
		"mem://",
		"redis:/h", "h:1234", "etcds://h", "http://h",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if fuzzing() && !isolated(t) {
			t.Skip("run the fuzzer in a network namespace with only loopback: unshare -n sh -c 'ip link set lo up; go test -fuzz ...'")
		}
		u, err := url.Parse(raw)
		if err != nil {
			return
		}
		hosts := strings.Split(u.Host, ",")
		for i := range hosts {
			hosts[i] = "127.0.0.1:" + strconv.Itoa(i+1) // closed ports, distinct
		}
		u.Host = strings.Join(hosts, ",")
		if u.Scheme == "sqlite" { // sqlite:relative/path is opaque
			u.Host, u.Opaque, u.Path = "", "", filepath.Join(t.TempDir(), "fuzz.db")
		}
		pw, _ := u.User.Password()
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		c, err := dlock.Open(ctx, u.String())
		if err == nil {
			if err := c.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			return
		}
		// A password that the rest of the URL contains too proves nothing.
		if len(pw) >= 4 && !strings.Contains(u.Redacted(), pw) && strings.Contains(err.Error(), pw) {
			t.Errorf("Open(%q) = %v: the error shows the password", u.Redacted(), err)
		}
	})
}

// fuzzing reports whether the test binary runs a fuzzer (-test.fuzz).
func fuzzing() bool {
	f := flag.Lookup("test.fuzz")
	return f != nil && f.Value.String() != ""
}

// isolated reports whether loopback is the only network interface up.
func isolated(t *testing.T) bool {
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifs {
		if i.Flags&net.FlagUp != 0 && i.Flags&net.FlagLoopback == 0 {
			return false
		}
	}
	return true
}
