package testsrv

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/dlockhq/dlock/internal/testing/testcert"
)

// etcdDirs are searched for etcd after PATH.
var etcdDirs = []string{"/usr/bin", "/usr/local/bin", "/opt/homebrew/bin"}

// StartEtcd starts a single-member etcd cluster (member "default") on two
// free ports on 127.0.0.1 — the client port and the peer port — with its
// data in a new temporary directory, and waits until GET /health on the
// client port reports {"health":"true"}. Its log (zap, error level and
// above) goes to the server log in that directory. etcd has no option to
// skip fsync before 3.5 (--unsafe-no-fsync); it is passed when the
// installed etcd lists it in --help.
//
// Server.Addr is the client address "127.0.0.1:port", Addrs holds Addr
// alone, and URL is "etcd://127.0.0.1:port". The error wraps ErrMissing if
// etcd cannot be found.
func StartEtcd(ctx context.Context) (*Server, error) { return startEtcd(ctx, nil) }

// startEtcd starts the member of StartEtcd, or of StartEtcdTLS if certs is
// not nil.
func startEtcd(ctx context.Context, certs *testcert.Set) (_ *Server, err error) {
	bin := lookPath([]string{"etcd"}, etcdDirs...)
	if bin == "" {
		return nil, fmt.Errorf("%w: etcd (etcd not found in PATH or %s)", ErrMissing, strings.Join(etcdDirs, ", "))
	}
	s, err := newServer(Etcd, nil, syscall.SIGTERM)
	if err != nil {
		return nil, err
	}
	defer s.abandonOnError(&err)
	dir := s.Dir
	noFsync := etcdSupports(ctx, bin, "--unsafe-no-fsync")
	data := filepath.Join(dir, "data")
	var peerPort int
	start := func(port int, log *os.File) (*exec.Cmd, error) {
		// A fresh member on every attempt to start: no state from one
		// that failed to bind its ports. A restart keeps its data and
		// ports.
		if !s.launched {
			var err error
			if peerPort, err = freePort(); err != nil {
				return nil, err
			}
			if err := os.RemoveAll(data); err != nil {
				return nil, err
			}
		}
		client := "http://" + loopbackAddr(port)
		if certs != nil {
			client = "https://" + loopbackAddr(port)
		}
		peer := "http://" + loopbackAddr(peerPort)
		args := []string{
			"--name", "default",
			"--data-dir", data,
			"--listen-client-urls", client,
			"--advertise-client-urls", client,
			"--listen-peer-urls", peer,
			"--initial-advertise-peer-urls", peer,
			"--initial-cluster", "default=" + peer,
			"--initial-cluster-state", "new",
			"--logger", "zap",
			"--log-level", "error",
			"--log-outputs", "stderr", // the server log
		}
		if noFsync {
			args = append(args, "--unsafe-no-fsync")
		}
		if certs != nil {
			args = append(args, etcdTLSArgs(certs)...)
		}
		return startProcess(bin, args, dir, nil, log)
	}
	ready := etcdHealthy
	if certs != nil {
		if ready, err = etcdHealthyTLS(certs); err != nil {
			return nil, err
		}
	}
	if err := s.launch(ctx, start, ready); err != nil {
		return nil, err
	}
	s.Addr = loopbackAddr(s.port)
	s.Addrs = []string{s.Addr}
	s.URL = "etcd://" + s.Addr
	if certs != nil {
		s.URL += tlsQuery(certs)
	}
	return s, nil
}

// etcdSupports reports whether etcd --help lists the option.
func etcdSupports(ctx context.Context, bin, option string) bool {
	cmd := exec.CommandContext(ctx, bin, "--help")
	cmd.Env = cleanEnv()
	out, _ := cmd.CombinedOutput() // etcd 3.4 exits non-zero after --help
	return strings.Contains(string(out), option+" ") || strings.Contains(string(out), option+"\n") || strings.Contains(string(out), option+"=")
}

// etcdHealthy is the readiness check of etcd: GET /health on the client
// port must answer {"health":"true"} (the member has a leader and serves
// requests). It uses a fresh connection each time and keeps none.
func etcdHealthy(ctx context.Context, port int) error {
	return etcdHealth(ctx, "http://"+loopbackAddr(port), nil)
}

// etcdHealth asks GET /health of the client URL base (http:// or https://,
// with the TLS configuration cfg).
func etcdHealth(ctx context.Context, base string, cfg *tls.Config) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/health", nil)
	if err != nil {
		return err
	}
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil, TLSClientConfig: cfg}}
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return fmt.Errorf("GET /health: %w", err)
	}
	var h struct {
		Health string `json:"health"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &h) != nil || h.Health != "true" {
		return fmt.Errorf("GET /health: %s: %q", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}
