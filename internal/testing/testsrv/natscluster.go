package testsrv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// StartNATSCluster starts a JetStream cluster of n nats-server processes
// (server names "n0", "n1", ...) on free ports on 127.0.0.1 — a client, a
// route and a monitoring port each — routed to each other, and waits until
// every member reports JetStream healthy on its monitoring port (GET
// /healthz: JetStream is current with the leader of its meta group). Each member
// keeps its JetStream data in its own subdirectory, so Restart brings a
// killed member back with its data. Stop kills the members (SIGKILL). Run
// starts it with n = 3.
//
// The Server's Name is "nats-cluster"; Addrs lists the members' client
// addresses in member order (Members returns them in that order, each
// named "nats-cluster/nI" after its server name nI), Addr is the first,
// and URL is "nats://a,b,c". The error wraps ErrMissing if nats-server
// cannot be found.
func StartNATSCluster(ctx context.Context, n int) (*Server, error) {
	if n < 1 {
		return nil, fmt.Errorf("testsrv: StartNATSCluster: n = %d, want at least 1", n)
	}
	bin := lookPath([]string{"nats-server"}, natsDirs...)
	if bin == "" {
		return nil, fmt.Errorf("%w: nats-server (nats-server not found in PATH or %s)", ErrMissing, strings.Join(natsDirs, ", "))
	}
	var err error
	for range startAttempts {
		var s *Server
		if s, err = startNATSCluster(ctx, bin, n); err == nil {
			return s, nil
		}
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	return nil, fmt.Errorf("testsrv: starting %s: %w", NATSCluster, err)
}

// startNATSCluster makes one attempt at starting the cluster, on ports
// chosen in advance (every member must know every route).
func startNATSCluster(ctx context.Context, bin string, n int) (_ *Server, err error) {
	s, err := newGroup(NATSCluster)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = s.Stop()
		}
	}()
	ports, err := freePorts(3 * n) // client, route, monitoring
	if err != nil {
		return nil, err
	}
	var routes []string
	for i := range n {
		routes = append(routes, "nats://"+loopbackAddr(ports[n+i]))
	}
	if err := s.startMembersTogether(ctx, n, func(ctx context.Context, i int) (*Server, error) {
		return s.startNATSMember(ctx, bin, "n"+strconv.Itoa(i), ports[i], ports[n+i], ports[2*n+i], strings.Join(routes, ","))
	}); err != nil {
		return nil, err
	}
	s.URL = "nats://" + strings.Join(s.Addrs, ",")
	return s, nil
}

// startNATSMember starts one member of the cluster.
func (s *Server) startNATSMember(ctx context.Context, bin, name string, clientPort, routePort, monitorPort int, routes string) (*Server, error) {
	dir := filepath.Join(s.Dir, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	m := &Server{Name: s.Name + "/" + name, logPath: filepath.Join(dir, logFile), stopSig: syscall.SIGKILL, portFn: portOnce(clientPort), monitorPort: monitorPort}
	start := func(port int, log *os.File) (*exec.Cmd, error) {
		args := []string{
			"-a", "127.0.0.1",
			"-p", strconv.Itoa(port),
			"-m", strconv.Itoa(monitorPort),
			"-n", name,
			"-js",
			"-sd", filepath.Join(dir, "js"),
			"--cluster_name", "dlock-test",
			"--cluster", "nats://" + loopbackAddr(routePort),
			"--routes", routes,
		}
		return startProcess(bin, args, dir, nil, log)
	}
	ready := func(ctx context.Context, _ int) error { return natsHealthy(ctx, monitorPort) }
	if err := m.launch(ctx, start, ready); err != nil {
		_ = m.Stop()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	m.Dir = dir
	m.Addr = loopbackAddr(m.port)
	m.Addrs = []string{m.Addr}
	return m, nil
}

// natsLeader finds the member that leads the stream of the key-value
// bucket "dlock" (KV_dlock), where locks opened from the cluster's URL
// live, or, before that bucket exists, the leader of the meta group, as
// the running members' /jsz pages say.
func natsLeader(ctx context.Context, members []*Server) (*Server, error) {
	type jsz struct {
		Meta *struct {
			Leader string `json:"leader"`
		} `json:"meta_cluster"`
		Accounts []struct {
			Streams []struct {
				Name    string `json:"name"`
				Cluster *struct {
					Leader string `json:"leader"`
				} `json:"cluster"`
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	pages, errs := askMembers(ctx, members, func(ctx context.Context, m *Server) (jsz, error) {
		var page jsz
		err := getJSON(ctx, "http://"+loopbackAddr(m.monitorPort)+"/jsz?accounts=true&streams=true", &page)
		return page, err
	})
	meta := ""
	for i, page := range pages {
		if errs[i] != nil {
			continue
		}
		for _, a := range page.Accounts {
			for _, st := range a.Streams {
				if st.Name == "KV_dlock" && st.Cluster != nil && st.Cluster.Leader != "" {
					return natsMember(members, st.Cluster.Leader)
				}
			}
		}
		if page.Meta != nil && meta == "" {
			meta = page.Meta.Leader
		}
	}
	if meta == "" {
		return nil, fmt.Errorf("no member names a leader: errors %v", errs)
	}
	return natsMember(members, meta)
}

// natsMember returns the running member whose server name is name.
func natsMember(members []*Server, name string) (*Server, error) {
	for _, m := range members {
		if strings.HasSuffix(m.Name, "/"+name) && m.running() {
			return m, nil
		}
	}
	return nil, fmt.Errorf("the leader %q is not a running member", name)
}

// getJSON decodes the JSON answer of GET url into v, over a connection of
// its own.
func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %q", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return json.Unmarshal(body, v)
}

// natsHealthy asks the monitoring port whether JetStream is healthy.
func natsHealthy(ctx context.Context, monitorPort int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+loopbackAddr(monitorPort)+"/healthz", nil)
	if err != nil {
		return err
	}
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /healthz: %s: %q", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}
