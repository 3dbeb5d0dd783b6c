package testsrv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// memberTimeout bounds each question Leader and Master ask one member, so
// that a paused member does not hold up the answer.
const memberTimeout = time.Second

// Leader returns the member that leads an etcd cluster (etcd,
// etcd-cluster) or a ZooKeeper ensemble (zookeeper, zookeeper-ensemble):
// for etcd, the member that names itself leader and that a majority of the
// members name leader too (maintenance status); for ZooKeeper, the one
// member whose four-letter word "srvr" answers "Mode: leader" while a
// majority answer as leader or follower (a standalone server leads
// itself); for a NATS cluster (nats-cluster), the leader of the stream of
// the bucket "dlock", or of the meta group before the bucket exists.
// Members that are killed or paused are not counted. Leader polls
// until there is such a member, ctx ends, or a minute passes.
func (s *Server) Leader(ctx context.Context) (*Server, error) {
	var find func(ctx context.Context, members []*Server) (*Server, error)
	switch s.Name {
	case Etcd, EtcdCluster:
		find = etcdLeader
	case ZooKeeper, ZooKeeperEnsemble:
		find = zkLeader
	case NATSCluster:
		find = natsLeader
	default:
		return nil, fmt.Errorf("testsrv: %s has no leader", s.Name)
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		leader, err := find(ctx, s.Members())
		if err == nil {
			return leader, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("testsrv: %s: no leader: %w; last answer: %v", s.Name, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// askMembers calls ask for every member in parallel, each with
// memberTimeout, and returns the answers and errors in member order. A
// member that Kill or Pause stopped is not asked (a process just sent
// SIGSTOP may still answer for a moment, and its peers still name it).
func askMembers[T any](ctx context.Context, members []*Server, ask func(ctx context.Context, m *Server) (T, error)) ([]T, []error) {
	answers := make([]T, len(members))
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !m.running() {
				errs[i] = fmt.Errorf("%s is killed or paused", m.Addr)
				return
			}
			ctx, cancel := context.WithTimeout(ctx, memberTimeout)
			defer cancel()
			answers[i], errs[i] = ask(ctx, m)
		}()
	}
	wg.Wait()
	return answers, errs
}

// etcdStatus is what an etcd member says of itself and its leader.
type etcdStatus struct {
	Header struct {
		MemberID string `json:"member_id"`
	} `json:"header"`
	Leader string `json:"leader"`
}

// etcdLeader finds the leader of the etcd members.
func etcdLeader(ctx context.Context, members []*Server) (*Server, error) {
	statuses, errs := askMembers(ctx, members, func(ctx context.Context, m *Server) (etcdStatus, error) {
		return etcdMemberStatus(ctx, m.Addr)
	})
	votes := map[string]int{}
	for i, st := range statuses {
		if errs[i] == nil && st.Leader != "" && st.Leader != "0" {
			votes[st.Leader]++
		}
	}
	for i, st := range statuses {
		if errs[i] == nil && st.Header.MemberID == st.Leader && votes[st.Leader] > len(members)/2 {
			return members[i], nil
		}
	}
	return nil, fmt.Errorf("no member is leader with a majority: statuses %+v, errors %v", statuses, errs)
}

// etcdMemberStatus asks the etcd member at addr for its status through the
// v3 JSON gateway (POST /v3/maintenance/status), over a connection of its
// own.
func etcdMemberStatus(ctx context.Context, addr string) (etcdStatus, error) {
	var st etcdStatus
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v3/maintenance/status", bytes.NewReader([]byte("{}")))
	if err != nil {
		return st, err
	}
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return st, err
	}
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("status: %s: %q", resp.Status, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, fmt.Errorf("status: %w in %q", err, body)
	}
	return st, nil
}

// zkLeader finds the leader of the ZooKeeper servers.
func zkLeader(ctx context.Context, members []*Server) (*Server, error) {
	modes, errs := askMembers(ctx, members, func(ctx context.Context, m *Server) (string, error) {
		reply, err := zkCommand(ctx, m.Addr, "srvr")
		if err != nil {
			return "", err
		}
		for _, line := range strings.Split(reply, "\n") {
			if mode, ok := strings.CutPrefix(strings.TrimSpace(line), "Mode: "); ok {
				return mode, nil
			}
		}
		return "", fmt.Errorf("srvr: %q", strings.TrimSpace(reply))
	})
	var leaders []*Server
	serving := 0
	for i, mode := range modes {
		if errs[i] != nil {
			continue
		}
		switch mode {
		case "leader", "standalone":
			leaders = append(leaders, members[i])
			serving++
		case "follower":
			serving++
		}
	}
	if len(leaders) == 1 && serving > len(members)/2 {
		return leaders[0], nil
	}
	return nil, fmt.Errorf("%d leaders, %d of %d members serving: modes %q, errors %v", len(leaders), serving, len(members), modes, errs)
}

// Master returns the member of a redis-sentinel that the sentinels name as
// the master of SentinelMaster: the address that a majority of the
// sentinels report (SENTINEL GET-MASTER-ADDR-BY-NAME), once that member
// reports itself master (INFO replication). Sentinels that are killed or
// paused are not counted. Master polls until there is such a member, ctx
// ends, or a minute passes.
func (s *Server) Master(ctx context.Context) (*Server, error) {
	if s.Name != RedisSentinel {
		return nil, fmt.Errorf("testsrv: %s has no sentinels to name a master", s.Name)
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		master, err := sentinelMaster(ctx, s.members[:2], s.members[2:])
		if err == nil {
			return master, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("testsrv: %s: no master: %w; last answer: %v", s.Name, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// sentinelMaster finds the one of servers that a majority of sentinels
// name as master and that reports itself master.
func sentinelMaster(ctx context.Context, servers, sentinels []*Server) (*Server, error) {
	named, errs := askMembers(ctx, sentinels, func(ctx context.Context, m *Server) (string, error) {
		c, err := dialRedis(ctx, m.Addr, nil)
		if err != nil {
			return "", err
		}
		defer c.Close()
		return c.sentinelMasterAddr(ctx)
	})
	votes := map[string]int{}
	for i, a := range named {
		if errs[i] == nil {
			votes[a]++
		}
	}
	for _, m := range servers {
		if votes[m.Addr] <= len(sentinels)/2 {
			continue
		}
		if m.Pid() == 0 {
			return nil, fmt.Errorf("sentinels name %s, which is not running", m.Addr)
		}
		ctx, cancel := context.WithTimeout(ctx, memberTimeout)
		defer cancel()
		c, err := dialRedis(ctx, m.Addr, nil)
		if err != nil {
			return nil, fmt.Errorf("sentinels name %s: %w", m.Addr, err)
		}
		defer c.Close()
		info, err := c.text(ctx, "INFO", "replication")
		if err != nil {
			return nil, fmt.Errorf("sentinels name %s: %w", m.Addr, err)
		}
		if role := infoField(info, "role"); role != "master" {
			return nil, fmt.Errorf("sentinels name %s, whose role is %s", m.Addr, role)
		}
		return m, nil
	}
	return nil, fmt.Errorf("no server named master by a majority of sentinels: %q, errors %v", named, errs)
}
