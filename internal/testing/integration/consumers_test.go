package integration_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// storeModules are, for each backend package, the module path prefixes of
// its store's client libraries.
var storeModules = map[string][]string{
	"memdlock":          nil,
	"redisdlock":        {"github.com/redis/"},
	"quorum":            {"github.com/redis/"},
	"etcddlock":         {"go.etcd.io/", "google.golang.org/grpc"},
	"zkdlock":           {"github.com/go-zookeeper/"},
	"memcachedlock":     {"github.com/bradfitz/gomemcache"},
	"natsdlock":         {"github.com/nats-io/"},
	"sqldlock/postgres": {"github.com/jackc/"},
	"sqldlock/mysql":    {"github.com/go-sql-driver/", "filippo.io/edwards25519"},
	"sqldlock/sqlite":   {"modernc.org/"},
}

// recipes are the recipe packages, each with the module path prefixes of
// the store clients it compiles in itself: fence's Redis guard is built on
// go-redis.
var recipes = map[string][]string{
	"job":       nil,
	"leader":    nil,
	"fill":      nil,
	"ratelimit": nil,
	"fence":     {"github.com/redis/go-redis/"},
}

// TestConsumersDownloadOnlyTheirStore checks that a program that imports
// package dlock, one backend and the recipes downloads no other store's
// client library when it runs `go mod tidy`, which loads the program's
// packages, their imports, and the tests of all of them (and what those
// tests import). A recipe may bring the client it compiles in itself, no
// other.
func TestConsumersDownloadOnlyTheirStore(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	const mod = "github.com/dlockhq/dlock"
	for backend, own := range storeModules {
		t.Run(backend, func(t *testing.T) {
			imports := []string{mod, mod + "/" + backend}
			allowed := own
			for r, brings := range recipes {
				imports = append(imports, mod+"/"+r)
				allowed = append(slices.Clip(allowed), brings...)
			}
			pkgs := goList(t, append([]string{"-deps"}, imports...)...)
			var ours []string
			for _, p := range pkgs {
				if p == mod || strings.HasPrefix(p, mod+"/") {
					ours = append(ours, p)
				}
			}
			mods := goList(t, append([]string{"-deps", "-test", "-f", "{{with .Module}}{{.Path}}{{end}}"}, ours...)...)
			slices.Sort(mods)
			mods = slices.Compact(mods)
			for other, prefixes := range storeModules {
				for _, prefix := range prefixes {
					if slices.Contains(own, prefix) {
						continue
					}
					for _, m := range mods {
						if strings.HasPrefix(m, prefix) && !slices.ContainsFunc(allowed, func(a string) bool { return strings.HasPrefix(m, a) }) {
							t.Errorf("a program using %s downloads %s, the client of %s", backend, m, other)
						}
					}
				}
			}
		})
	}
}

// goList runs go list with args and returns the lines of its output.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", strings.Join(args, " "), err)
	}
	return strings.Fields(string(out))
}
