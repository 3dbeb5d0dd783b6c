package testsrv

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// checkConsensusServer checks a running etcd or ZooKeeper server: its
// addresses and URL, its readiness check, and that it serves requests.
func checkConsensusServer(t *testing.T, s *Server) {
	t.Helper()
	if !strings.HasPrefix(s.Addr, "127.0.0.1:") || len(s.Addrs) != 1 || s.Addrs[0] != s.Addr {
		t.Fatalf("Addr = %q, Addrs = %q; want 127.0.0.1:port alone", s.Addr, s.Addrs)
	}
	wantURL := map[string]string{Etcd: "etcd://" + s.Addr, ZooKeeper: "zk://" + s.Addr}[s.Name]
	if s.URL != wantURL {
		t.Errorf("URL = %q, want %q", s.URL, wantURL)
	}
	if s.DSN != "" {
		t.Errorf("DSN = %q, want none", s.DSN)
	}
	if _, _, err := s.NewDatabase(context.Background(), "x"); err == nil {
		t.Errorf("NewDatabase on %s succeeded, want an error", s.Name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A single server leads itself.
	if l, err := s.Leader(ctx); err != nil || l != s {
		t.Errorf("Leader() = %v, %v; want the server itself", l, err)
	}
	switch s.Name {
	case Etcd:
		if err := etcdHealthy(ctx, s.port); err != nil {
			t.Fatalf("health: %v", err)
		}
		// A write and a read through the v3 JSON gateway.
		key, val := "testsrv/"+t.Name(), strconv.FormatInt(time.Now().UnixNano(), 10)
		etcdJSON(ctx, t, s.Addr, "/v3/kv/put", map[string]string{"key": b64(key), "value": b64(val)}, nil)
		var rng struct {
			Kvs []struct{ Value string }
		}
		etcdJSON(ctx, t, s.Addr, "/v3/kv/range", map[string]string{"key": b64(key)}, &rng)
		if len(rng.Kvs) != 1 || rng.Kvs[0].Value != b64(val) {
			t.Errorf("range %s = %+v, want value %q", key, rng.Kvs, b64(val))
		}
	case ZooKeeper:
		if err := zkReady(ctx, s.port); err != nil {
			t.Fatalf("readiness: %v", err)
		}
		mntr, err := zkCommand(ctx, s.Addr, "mntr")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(mntr, "zk_server_state\tstandalone") {
			t.Errorf("mntr = %q, want zk_server_state standalone", mntr)
		}
		// Commands outside the whitelist are refused.
		if reply, err := zkCommand(ctx, s.Addr, "dump"); err != nil || !strings.Contains(reply, "not in the whitelist") {
			t.Errorf("dump = %q, %v; want refused", reply, err)
		}
	default:
		t.Fatalf("unknown kind %q", s.Name)
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// etcdJSON posts a request to etcd's v3 JSON gateway and decodes the reply
// into out (if not nil).
func etcdJSON(ctx context.Context, t *testing.T, addr, path string, in, out any) {
	t.Helper()
	body, _ := json.Marshal(in)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s: %s", path, resp.Status, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("POST %s: %v in %s", path, err, b)
		}
	}
}

// TestConsensusMissing checks that StartEtcd and StartZooKeeper report a
// missing installation with ErrMissing.
func TestConsensusMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	oldEtcd, oldZK, oldJava := etcdDirs, zkJarDirs, javaDirs
	t.Cleanup(func() { etcdDirs, zkJarDirs, javaDirs = oldEtcd, oldZK, oldJava })
	etcdDirs, zkJarDirs = nil, nil
	for _, name := range []string{Etcd, ZooKeeper} {
		if s, err := starters[name](context.Background()); !errors.Is(err, ErrMissing) {
			s.Stop()
			t.Errorf("%s without its files: err = %v, want ErrMissing", name, err)
		}
	}
	// The jar is there but java is not.
	zkJarDirs, javaDirs = oldZK, nil
	if _, err := os.Stat(oldZK[0] + "/zookeeper.jar"); err != nil {
		t.Skipf("zookeeper.jar not installed: %v", err)
	}
	if s, err := StartZooKeeper(context.Background()); !errors.Is(err, ErrMissing) || !strings.Contains(fmt.Sprint(err), "java not found") {
		s.Stop()
		t.Errorf("zookeeper without java: err = %v, want ErrMissing naming java", err)
	}
}
