//go:build unix

package cli_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock/cmd/dlock/internal/check"
	"github.com/dlockhq/dlock/cmd/dlock/internal/cli"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// audit runs `dlock check --audit --json` on url and returns its exit
// status and report.
func audit(t *testing.T, url string) (int, *check.AuditReport) {
	t.Helper()
	r := runMain(t, "check", "--audit", "--json", "--url", url)
	var rep check.AuditReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("the report is not JSON (%v): %q; stderr %q", err, r.stdout, r.stderr)
	}
	if want := cli.ExitOK; !rep.OK {
		want = cli.ExitCheckFailed
		if r.code != want {
			t.Errorf("exit status %d with a finding that breaks a promise, want %d", r.code, want)
		}
	} else if r.code != want {
		t.Errorf("exit status %d with no finding that breaks a promise, want %d", r.code, want)
	}
	return r.code, &rep
}

// finding returns the finding whose setting contains setting, or nil.
func finding(rep *check.AuditReport, setting string) *check.Finding {
	for i, f := range rep.Findings {
		if strings.Contains(f.Setting, setting) {
			return &rep.Findings[i]
		}
	}
	return nil
}

// wantFinding fails unless rep has a finding of severity about setting.
func wantFinding(t *testing.T, rep *check.AuditReport, setting, severity string) {
	t.Helper()
	f := finding(rep, setting)
	switch {
	case f == nil:
		t.Errorf("no finding about %q; findings: %+v", setting, rep.Findings)
	case f.Severity != severity:
		t.Errorf("finding %q is %q, want %q", f.Setting, f.Severity, severity)
	case f.Risk == "" || f.Fix == "":
		t.Errorf("finding %q does not say what can go wrong and how to fix it: %+v", f.Setting, f)
	}
}

func startServer(t *testing.T, start func(context.Context) (*testsrv.Server, error)) *testsrv.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	return srv
}

func redisConfig(t *testing.T, addr string, kv ...string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	for i := 0; i < len(kv); i += 2 {
		if err := c.ConfigSet(context.Background(), kv[i], kv[i+1]).Err(); err != nil {
			t.Fatalf("CONFIG SET %s %s: %v", kv[i], kv[i+1], err)
		}
	}
}

// TestAuditRedis sets a Redis server's persistence and eviction badly, one
// setting at a time, and audits it after each.
func TestAuditRedis(t *testing.T) {
	srv := startServer(t, testsrv.StartRedis)
	good := []string{"appendonly", "yes", "appendfsync", "always", "maxmemory", "0", "maxmemory-policy", "noeviction"}
	for _, tc := range []struct {
		name     string
		config   []string
		setting  string // of the finding; "" for none
		severity string
	}{
		{"good", nil, "", ""},
		{"eviction", []string{"maxmemory", "100mb", "maxmemory-policy", "allkeys-lru"}, "maxmemory-policy allkeys-lru", check.SeverityBreaks},
		{"volatile eviction", []string{"maxmemory", "100mb", "maxmemory-policy", "volatile-ttl"}, "maxmemory-policy volatile-ttl", check.SeverityBreaks},
		{"no limit", []string{"maxmemory", "0", "maxmemory-policy", "allkeys-lru"}, "", ""},
		{"everysec", []string{"appendfsync", "everysec"}, "appendfsync everysec", check.SeverityRisk},
		{"no persistence", []string{"appendonly", "no"}, "appendonly no", check.SeverityRisk},
	} {
		t.Run(tc.name, func(t *testing.T) {
			redisConfig(t, srv.Addr, append(good, tc.config...)...)
			_, rep := audit(t, srv.URL)
			if tc.setting == "" {
				if len(rep.Findings) > 0 {
					t.Errorf("findings on a well configured server: %+v", rep.Findings)
				}
				return
			}
			wantFinding(t, rep, tc.setting, tc.severity)
		})
	}
	redisConfig(t, srv.Addr, "maxmemory-policy", "allkeys-random", "maxmemory", "1gb")
	r := runMain(t, "check", "--audit", "--url", srv.URL)
	if r.code != cli.ExitCheckFailed || !strings.Contains(r.stdout, "maxmemory-policy allkeys-random") || !strings.Contains(r.stdout, "FAIL") {
		t.Errorf("text audit of an evicting server: exit %d, output %q", r.code, r.stdout)
	}
}

// TestAuditRedisNoConfig audits Redis as a user who may not run CONFIG, as
// on managed services: the settings are unknown, which is a risk; the
// password is not shown.
func TestAuditRedisNoConfig(t *testing.T) {
	srv := startServer(t, testsrv.StartRedis)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	const password = "s3cret-audit"
	if err := c.Do(context.Background(), "ACL", "SETUSER", "auditor", "on", ">"+password, "~*", "&*", "+@all", "-config").Err(); err != nil {
		t.Fatal(err)
	}
	url := strings.Replace(srv.URL, "redis://", "redis://auditor:"+password+"@", 1)
	_, rep := audit(t, url)
	wantFinding(t, rep, "CONFIG GET", check.SeverityRisk)
	r := runMain(t, "check", "--audit", "--url", url)
	if strings.Contains(r.stdout+r.stderr, password) {
		t.Errorf("the password is shown: %s%s", r.stdout, r.stderr)
	}
}

// TestAuditRedisReplicas gives a Redis server a replica: without WAIT a
// failover can lose a lock.
func TestAuditRedisReplicas(t *testing.T) {
	master := startServer(t, testsrv.StartRedis)
	replica := startServer(t, testsrv.StartRedis)
	// No wait for more replicas before a full synchronisation.
	redisConfig(t, master.Addr, "appendonly", "yes", "appendfsync", "always", "repl-diskless-sync-delay", "0")
	t.Cleanup(func() { redisConfig(t, master.Addr, "appendonly", "no") }) // for a quick stop
	c := redis.NewClient(&redis.Options{Addr: replica.Addr})
	defer c.Close()
	host, port, _ := strings.Cut(master.Addr, ":")
	ctx := context.Background()
	if err := c.ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	defer c.ReplicaOf(ctx, "NO", "ONE")
	m := redis.NewClient(&redis.Options{Addr: master.Addr})
	defer m.Close()
	// WAIT returns once the replica has synchronised and acknowledged.
	if n, err := m.Wait(ctx, 1, time.Minute).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT for the replica: %d, %v", n, err)
	}
	_, rep := audit(t, master.URL)
	wantFinding(t, rep, "no wait_replicas", check.SeverityRisk)
	// The replica is read too: it may become the master.
	redisConfig(t, replica.Addr, "maxmemory", "100mb", "maxmemory-policy", "volatile-lru")
	t.Cleanup(func() { redisConfig(t, replica.Addr, "maxmemory", "0") })
	_, rep = audit(t, master.URL)
	if f := finding(rep, "maxmemory-policy volatile-lru"); f == nil || f.Server != replica.Addr || f.Severity != check.SeverityBreaks {
		t.Errorf("the replica's eviction: finding %+v", f)
	}
	_, rep = audit(t, master.URL+"?wait_replicas=1&wait_timeout=1s")
	if f := finding(rep, "wait_replicas"); f != nil {
		t.Errorf("finding with wait_replicas in the URL: %+v", f)
	}
}

// TestAuditRedisSentinelCluster audits Sentinel and Cluster deployments:
// asynchronous replication makes them efficiency stores.
func TestAuditRedisSentinelCluster(t *testing.T) {
	for name, start := range map[string]func(context.Context) (*testsrv.Server, error){
		"sentinel": testsrv.StartRedisSentinel, "cluster": testsrv.StartRedisCluster,
	} {
		t.Run(name, func(t *testing.T) {
			srv := startServer(t, start)
			_, rep := audit(t, srv.URL)
			wantFinding(t, rep, "redis+"+name, check.SeverityRisk)
			masters, replicas := 0, 0
			for _, s := range rep.Servers {
				switch s.Settings["role"] {
				case "master":
					masters++
				case "slave":
					replicas++
				}
			}
			if masters == 0 || replicas != masters {
				t.Errorf("%d masters and %d replicas read, want as many replicas as masters: %+v", masters, replicas, rep.Servers)
			}
		})
	}
}

// sqlExec runs statements on the database of a test server.
func sqlExec(t *testing.T, driverName, dsn string, stmts ...string) {
	t.Helper()
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// TestAuditPostgres turns off synchronous_commit, then fsync, on a
// PostgreSQL server: a crash can then forget tokens it issued.
func TestAuditPostgres(t *testing.T) {
	srv := startServer(t, testsrv.StartPostgres)
	// The test server runs without fsync (set on its command line, which
	// ALTER SYSTEM cannot override): the audit finds it.
	_, rep := audit(t, srv.URL)
	wantFinding(t, rep, "fsync off", check.SeverityBreaks)
	if f := finding(rep, "synchronous_commit"); f != nil || rep.Servers[0].Settings["synchronous_commit"] != "on" {
		t.Errorf("synchronous_commit on reported: %+v (read %+v)", f, rep.Servers)
	}
	if f := finding(rep, "pooler"); f != nil || rep.Servers[0].Settings["pooling"] != "session" {
		t.Errorf("a pooler found in front of a server reached directly: %+v (read %+v)", f, rep.Servers)
	}
	sqlExec(t, "pgx", srv.DSN, "ALTER SYSTEM SET synchronous_commit = off", "SELECT pg_reload_conf()")
	_, rep = audit(t, srv.URL)
	wantFinding(t, rep, "synchronous_commit off", check.SeverityBreaks)
}

// TestAuditMariaDB sets innodb_flush_log_at_trx_commit=2 on a MariaDB
// server: InnoDB then flushes its log about once a second.
func TestAuditMariaDB(t *testing.T) {
	srv := startServer(t, testsrv.StartMariaDB)
	// The test server flushes its log once a second: the audit finds it.
	_, rep := audit(t, srv.URL)
	wantFinding(t, rep, "innodb_flush_log_at_trx_commit 2", check.SeverityBreaks)
	sqlExec(t, "mysql", srv.DSN, "SET GLOBAL innodb_flush_log_at_trx_commit = 1")
	_, rep = audit(t, srv.URL)
	if len(rep.Findings) > 0 || rep.Servers[0].Settings["innodb_flush_log_at_trx_commit"] != "1" {
		t.Errorf("findings on a well configured server: %+v (read %+v)", rep.Findings, rep.Servers)
	}
}

// TestAuditMariaDBBinlog turns the binary log on, where sync_binlog 0 (the
// default) lets a crash lose commits; then sets sync_binlog 1.
func TestAuditMariaDBBinlog(t *testing.T) {
	srv := startServer(t, func(ctx context.Context) (*testsrv.Server, error) {
		return testsrv.StartMariaDBWith(ctx, "--log-bin", "--innodb-flush-log-at-trx-commit=1")
	})
	_, rep := audit(t, srv.URL)
	wantFinding(t, rep, "log_bin on, sync_binlog 0", check.SeverityBreaks)
	sqlExec(t, "mysql", srv.DSN, "SET GLOBAL sync_binlog = 1")
	if _, rep = audit(t, srv.URL); len(rep.Findings) > 0 {
		t.Errorf("findings with sync_binlog 1: %+v (read %+v)", rep.Findings, rep.Servers)
	}
}

// TestAuditEtcd audits the installed etcd (whose release has the known
// lease bugs unless it is recent) with a session shorter than the lease
// its election timeout allows, and with one long enough.
func TestAuditEtcd(t *testing.T) {
	srv := startServer(t, testsrv.StartEtcd)
	_, rep := audit(t, srv.URL+"?session=1s")
	v := rep.Servers[0].Settings["version"]
	if v == "" {
		t.Fatalf("no version read: %+v", rep.Servers)
	}
	if f := finding(rep, "etcd "+v); (f != nil) != etcdHasLeaseBugs(v) {
		t.Errorf("etcd %s: finding %+v", v, f)
	}
	// The default election timeout (1s) makes leases last 2s at least.
	wantFinding(t, rep, "session asked 1s, granted 2s", check.SeverityRisk)
	_, rep = audit(t, srv.URL+"?session=5s")
	if f := finding(rep, "session"); f != nil {
		t.Errorf("finding on a 5s session: %+v", f)
	}
}

// TestAuditEtcdCluster reads every member of a 3-member cluster from a URL
// that names one.
func TestAuditEtcdCluster(t *testing.T) {
	srv := startServer(t, func(ctx context.Context) (*testsrv.Server, error) { return testsrv.StartEtcdCluster(ctx, 3) })
	_, rep := audit(t, "etcd://"+srv.Addrs[1])
	if len(rep.Servers) != 3 {
		t.Fatalf("%d members read, want 3: %+v", len(rep.Servers), rep.Servers)
	}
	for _, s := range rep.Servers {
		if s.Settings["version"] == "" {
			t.Errorf("%s: no version read", s.Addr)
		}
	}
}

// etcdHasLeaseBugs reports whether etcd v (3.4 or 3.5) predates the fixes.
func etcdHasLeaseBugs(v string) bool {
	var minor, patch int
	fmt.Sscanf(v, "3.%d.%d", &minor, &patch)
	return minor == 4 && patch < 30 || minor == 5 && patch < 13
}

// TestAuditZooKeeper asks a ZooKeeper server whose maxSessionTimeout is
// 20s for a longer session.
func TestAuditZooKeeper(t *testing.T) {
	srv := startServer(t, testsrv.StartZooKeeper)
	_, rep := audit(t, srv.URL+"?session=30s")
	wantFinding(t, rep, "session asked 30s, granted 20s", check.SeverityRisk)
	_, rep = audit(t, srv.URL+"?session=5s")
	if len(rep.Findings) > 0 || rep.Servers[0].Clock == nil {
		t.Errorf("findings on a 5s session: %+v; clock %+v", rep.Findings, rep.Servers[0].Clock)
	}
	// Under a chroot that does not exist the clock cannot be read.
	_, rep = audit(t, srv.URL+"/no/such/chroot?session=5s")
	wantFinding(t, rep, "the clock: creating a znode", check.SeverityRisk)
	if rep.Servers[0].Settings["session_negotiated"] != "5s" {
		t.Errorf("negotiated session not read: %+v", rep.Servers)
	}
	// The znode whose mtime is the server's clock is gone.
	c, _, err := zk.Connect([]string{srv.Addr}, 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if kids, _, err := c.Children("/"); err != nil || slices.ContainsFunc(kids, func(k string) bool { return strings.Contains(k, "audit") }) {
		t.Errorf("znodes left at the root: %q, %v", kids, err)
	}
}

// TestAuditRedlock audits Redlock over servers without persistence, then
// with it, and over two servers.
func TestAuditRedlock(t *testing.T) {
	srv := startServer(t, func(ctx context.Context) (*testsrv.Server, error) { return testsrv.StartRedisQuorum(ctx, 3) })
	_, rep := audit(t, srv.URL)
	for _, addr := range srv.Addrs {
		if !slices.ContainsFunc(rep.Findings, func(f check.Finding) bool {
			return f.Server == addr && strings.HasPrefix(f.Setting, "appendonly no") && f.Severity == check.SeverityBreaks
		}) {
			t.Errorf("%s: no persistence not found as breaking: %+v", addr, rep.Findings)
		}
	}
	for _, addr := range srv.Addrs {
		redisConfig(t, addr, "appendonly", "yes", "appendfsync", "always")
		t.Cleanup(func() { redisConfig(t, addr, "appendonly", "no") }) // for a quick stop
	}
	if _, rep = audit(t, srv.URL); len(rep.Findings) > 0 {
		t.Errorf("findings on well configured servers: %+v", rep.Findings)
	}
	_, rep = audit(t, "redlock://"+strings.Join(srv.Addrs[:2], ","))
	wantFinding(t, rep, "2 Redlock servers", check.SeverityRisk)
}

// TestAuditUsage checks the exit statuses of a bad command line and of a
// store that cannot be reached.
func TestAuditUsage(t *testing.T) {
	if r := runMain(t, "check", "--audit", "--workers", "3", "--url", "redis://127.0.0.1:1"); r.code != cli.ExitUsage || !strings.Contains(r.stderr, "--workers") {
		t.Errorf("--audit --workers: exit %d, stderr %q; want %d naming --workers", r.code, r.stderr, cli.ExitUsage)
	}
	if r := runMain(t, "check", "--audit", "--url", "nosuch://x"); r.code != cli.ExitUsage {
		t.Errorf("unknown scheme: exit %d, want %d", r.code, cli.ExitUsage)
	}
	if r := runMain(t, "check", "--audit", "--url", "redis://127.0.0.1:1?dial_timeout=1s"); r.code != cli.ExitUnavailable {
		t.Errorf("unreachable store: exit %d, want %d", r.code, cli.ExitUnavailable)
	}
}

// TestAuditPgBouncer audits PostgreSQL through PgBouncer pooling
// transactions, then sessions.
func TestAuditPgBouncer(t *testing.T) {
	pg := startServer(t, testsrv.StartPostgres)
	for _, mode := range []string{"transaction", "session"} {
		t.Run(mode, func(t *testing.T) {
			pb := startServer(t, func(ctx context.Context) (*testsrv.Server, error) { return testsrv.StartPgBouncer(ctx, pg, mode) })
			_, rep := audit(t, pb.URL)
			if f := finding(rep, "a pooler in transaction mode"); (f != nil) != (mode == "transaction") {
				t.Errorf("PgBouncer in %s mode: pooler finding %+v", mode, f)
			}
			wantFinding(t, rep, "fsync off", check.SeverityBreaks) // read through the pooler too
		})
	}
}

// TestAuditMemcached audits memcached as it starts by default (evicting
// when memory runs short, flush_all allowed), with a LRU that never evicts
// short TTLs, and with -M and -F.
func TestAuditMemcached(t *testing.T) {
	srv := startServer(t, testsrv.StartMemcached)
	_, rep := audit(t, srv.URL)
	wantFinding(t, rep, "evictions on", check.SeverityBreaks)
	wantFinding(t, rep, "flush_enabled yes", check.SeverityRisk)
	if rep.Servers[0].Clock == nil {
		t.Errorf("no clock read: %+v", rep.Servers)
	}
	srv = startServer(t, func(ctx context.Context) (*testsrv.Server, error) {
		return testsrv.StartMemcachedWith(ctx, "-F", "-o", "temporary_ttl=120")
	})
	_, rep = audit(t, srv.URL)
	wantFinding(t, rep, "temp_lru yes, temporary_ttl 120", check.SeverityRisk)
	srv = startServer(t, func(ctx context.Context) (*testsrv.Server, error) { return testsrv.StartMemcachedWith(ctx, "-M", "-F") })
	if _, rep = audit(t, srv.URL); len(rep.Findings) > 0 {
		t.Errorf("findings on memcached -M -F: %+v", rep.Findings)
	}
}

// natsVarzConf is the configuration of a nats-server whose application
// account may ask for the server's settings ($SYS.REQ.SERVER.PING.VARZ),
// which clients join without credentials.
const natsVarzConf = `
accounts {
  SYS: { users: [{user: sys, password: unused-sys}], exports: [{service: "$SYS.REQ.SERVER.PING.VARZ"}] }
  APP: { jetstream: enabled, users: [{user: app, password: unused-app}], imports: [{service: {account: SYS, subject: "$SYS.REQ.SERVER.PING.VARZ"}}] }
}
system_account: SYS
no_auth_user: app
`

// startNATSConf starts a JetStream server with the configuration conf.
func startNATSConf(t *testing.T, conf string) *testsrv.Server {
	t.Helper()
	file := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return startServer(t, func(ctx context.Context) (*testsrv.Server, error) {
		return testsrv.StartNATSWith(ctx, "-js", "-c", file)
	})
}

// TestAuditNATS audits a single JetStream server: its bucket of one
// replica, its sync_interval (unreadable to an account that may not ask
// for the server's settings or is denied them, then the default 2m, then
// always) and a
// bucket in memory storage.
func TestAuditNATS(t *testing.T) {
	srv := startServer(t, testsrv.StartNATS)
	_, rep := audit(t, srv.URL)
	wantFinding(t, rep, "bucket dlock: 1 replica, on a single server", check.SeverityRisk)
	wantFinding(t, rep, "sync_interval: the server shows it", check.SeverityRisk)
	if s := rep.Servers[0]; s.Clock == nil || s.Settings["nats-server"] == "" || s.Settings["storage"] != "file" {
		t.Errorf("read %+v", s)
	}
	if f := finding(rep, "nats-server"); f != nil {
		t.Errorf("finding on nats-server %s: %+v", rep.Servers[0].Settings["nats-server"], f)
	}
	nc, err := nats.Connect(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "mem", History: 1, Storage: jetstream.MemoryStorage, LimitMarkerTTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	_, rep = audit(t, srv.URL+"/mem")
	wantFinding(t, rep, "bucket mem: memory storage", check.SeverityBreaks)

	// An account denied the subject gets no answer.
	srv = startNATSConf(t, `authorization { users: [{user: app, password: unused-app, permissions: {publish: {deny: ["$SYS.>"]}}}] }
no_auth_user: app
`)
	_, rep = audit(t, srv.URL)
	wantFinding(t, rep, "sync_interval: the server shows it", check.SeverityRisk)

	srv = startNATSConf(t, natsVarzConf)
	_, rep = audit(t, srv.URL)
	wantFinding(t, rep, "sync_interval 2m0s", check.SeverityBreaks)
	if rep.Servers[0].Unreadable != "" {
		t.Errorf("unreadable: %s", rep.Servers[0].Unreadable)
	}
	srv = startNATSConf(t, natsVarzConf+"jetstream { sync_interval: always }\n")
	_, rep = audit(t, srv.URL)
	if f := finding(rep, "sync_interval"); f != nil || rep.Servers[0].Settings["sync_interval"] != "always" {
		t.Errorf("sync_interval always: finding %+v (read %+v)", f, rep.Servers)
	}
}

// TestAuditNATSCluster audits buckets of one, two and three replicas on a
// JetStream cluster.
func TestAuditNATSCluster(t *testing.T) {
	srv := startServer(t, func(ctx context.Context) (*testsrv.Server, error) { return testsrv.StartNATSCluster(ctx, 3) })
	_, rep := audit(t, srv.URL)
	wantFinding(t, rep, "bucket dlock: 1 replica, on one server of the cluster dlock-test", check.SeverityRisk)
	if f := finding(rep, "1 replica"); f != nil && !member(srv, f.Server) {
		t.Errorf("the finding names %q, not the member that leads the bucket", f.Server)
	}
	_, rep = audit(t, srv.URL+"/r2?replicas=2")
	wantFinding(t, rep, "bucket r2: 2 replicas", check.SeverityRisk)
	_, rep = audit(t, srv.URL+"/r3?replicas=3")
	if f := finding(rep, "replica"); f != nil || rep.Servers[0].Settings["replicas"] != "3" {
		t.Errorf("bucket of 3 replicas: finding %+v (read %+v)", f, rep.Servers)
	}
	// Each server of the bucket is read, by name.
	if len(rep.Servers) != 3 {
		t.Fatalf("%d servers read, want the 3 of the bucket: %+v", len(rep.Servers), rep.Servers)
	}
	for _, s := range rep.Servers {
		if !member(srv, s.Addr) || s.Settings["nats-server"] == "" || !strings.HasPrefix(s.Unreadable, "sync_interval") {
			t.Errorf("read %+v", s)
		}
	}
}

// member reports whether the cluster srv has a member of server name name.
func member(srv *testsrv.Server, name string) bool {
	return slices.ContainsFunc(srv.Members(), func(m *testsrv.Server) bool { return strings.HasSuffix(m.Name, "/"+name) })
}
