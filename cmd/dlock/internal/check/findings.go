package check

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The severities of a finding.
const (
	// SeverityBreaks marks a setting that breaks a promise of the backend
	// (mutual exclusion within the lease, durable tokens where the backend
	// declares them): `dlock check --audit` exits 1.
	SeverityBreaks = "breaks"
	// SeverityRisk marks a setting that can cost a lock or a token in a
	// way the backend does not promise to prevent, or that the audit
	// could not verify.
	SeverityRisk = "risk"
)

// maxSkew is the clock difference between this host and a server that
// the audit reports, beyond the measurement's bound.
const maxSkew = 500 * time.Millisecond

// Finding is one setting of a deployment that can make a lock fail.
type Finding struct {
	Severity string `json:"severity"`
	Server   string `json:"server,omitempty"` // the server it concerns; empty for the whole deployment
	Setting  string `json:"setting"`          // the setting, as read
	Risk     string `json:"risk"`             // what can go wrong
	Fix      string `json:"fix"`
}

// fixedLeaseBugs are the first etcd releases of each minor version without
// the known lease bugs (a paused old leader revoking leases the new leader
// kept alive, etcd-io/etcd#15247, and its relatives).
var fixedLeaseBugs = map[string]int{"3.4": 30, "3.5": 13}

// judge turns what the audit read into findings: every rule of the audit
// lives here.
func (rep *AuditReport) judge() []Finding {
	var fs []Finding
	add := func(sev, server, setting, risk, fix string) {
		fs = append(fs, Finding{Severity: sev, Server: server, Setting: setting, Risk: risk, Fix: fix})
	}
	redlock := rep.scheme == "redlock" || rep.scheme == "redlocks"
	switch {
	case rep.scheme == "redis+sentinel" || rep.scheme == "redis+cluster":
		add(SeverityRisk, "", rep.scheme,
			"Sentinel and Cluster replicate asynchronously: a master that fails after granting a lock and before a replica has it is replaced by that replica, which grants the lock again while the first holder still works; tokens can go back",
			"use these locks for efficiency only (a duplicate run is tolerable); for correctness use etcd, ZooKeeper or PostgreSQL and pass Lock.Token to the protected resource")
	case redlock && len(rep.Servers) < 3:
		add(SeverityRisk, "", plural(len(rep.Servers), "Redlock server", "Redlock servers"),
			"with fewer than 3 servers a majority is every server: Redlock survives no server failure, and gains nothing over one Redis",
			"name 3 or 5 independent Redis servers in the URL")
	}
	for _, s := range rep.Servers {
		set := s.Settings
		if s.Unreadable != "" {
			add(SeverityRisk, s.Addr, s.Unreadable, "the audit could not read it: what it would find there is unknown",
				"run the audit as a user allowed to read it, or check the settings docs/check.md lists by hand")
		}
		if p := set["maxmemory-policy"]; set["maxmemory"] != "" && set["maxmemory"] != "0" && p != "noeviction" {
			add(SeverityBreaks, s.Addr, fmt.Sprintf("maxmemory %s, maxmemory-policy %s", set["maxmemory"], p),
				"under memory pressure Redis evicts keys, lock keys included (they carry a TTL, which the volatile-* policies look for): an evicted lock is free at once while its holder still works",
				"CONFIG SET maxmemory-policy noeviction (and in redis.conf), or keep the locks on a Redis without maxmemory")
		}
		switch {
		case set["evictions"] == "on" && set["temp_lru"] == "yes":
			add(SeverityRisk, s.Addr, fmt.Sprintf("evictions on, maxbytes %s, temp_lru yes, temporary_ttl %s", set["maxbytes"], set["temporary_ttl"]),
				"memcached never evicts an item whose TTL is under temporary_ttl ("+set["temporary_ttl"]+"s), so locks of shorter leases are safe; a lock of a longer lease is evicted when memory runs short, and is free at once while its holder still works",
				"keep leases under temporary_ttl (raise it with -o temporary_ttl=N), or run memcached with -M (no evictions: a full server refuses new items instead)")
		case set["evictions"] == "on":
			add(SeverityBreaks, s.Addr, "evictions on, maxbytes "+set["maxbytes"],
				"when memory runs short memcached evicts the least recently used items, lock items included: an evicted lock is free at once while its holder still works, and two clients hold it",
				"run memcached with -M (no evictions: a full server refuses new items instead) and enough -m, or with -o temporary_ttl=N above the longest lease (items of a shorter TTL are never evicted), or a memcached of its own for locks")
		}
		if set["flush_enabled"] == "yes" {
			add(SeverityRisk, s.Addr, "flush_enabled yes",
				"any client that reaches the server can send flush_all (a cache-clearing script, an operator), which frees every lock at once while the holders still work: memcached asks for no credentials in the client dlock uses",
				"run memcached with -F (flush_all disabled), or a memcached of its own for locks that nothing flushes")
		}
		switch {
		case set["appendonly"] == "no" && redlock:
			add(SeverityBreaks, s.Addr, fmt.Sprintf("appendonly no, save %q", set["save"]),
				"a Redlock server restarted without its data forgets the locks it granted: with the others' votes a second client takes a lock that is still held",
				"appendonly yes with appendfsync always, or restart a server only after the longest lease has passed (a delayed restart, which the audit cannot see)")
		case set["appendonly"] == "no":
			add(SeverityRisk, s.Addr, fmt.Sprintf("appendonly no, save %q", set["save"]),
				"a restart (crash, OOM kill, failover) forgets every lock, so a held lock can be taken again at once, and fencing tokens start again from 1",
				"appendonly yes with appendfsync always; or use this store for efficiency locks only")
		case set["appendonly"] == "yes" && set["appendfsync"] != "always":
			sev := SeverityRisk
			if redlock {
				sev = SeverityBreaks
			}
			add(sev, s.Addr, "appendfsync "+set["appendfsync"],
				"a crash loses the writes of up to the last second: locks granted and token increments in it are forgotten, so a held lock can be taken again and tokens can go back",
				"CONFIG SET appendfsync always (and in redis.conf)")
		}
		if n, _ := strconv.Atoi(set["connected_slaves"]); n > 0 && !redlock && rep.query.Get("wait_replicas") == "" {
			add(SeverityRisk, s.Addr, fmt.Sprintf("role %s, %s, no wait_replicas", set["role"], plural(n, "replica", "replicas")),
				"replication is asynchronous: a failover to a replica that had not received a lock grants it again",
				"add wait_replicas=N&wait_timeout=D to the URL so that every acquire waits for N replicas (WAIT); it narrows the window without closing it")
		}
		if v := set["synchronous_commit"]; v == "off" {
			add(SeverityBreaks, s.Addr, "synchronous_commit off",
				"a crash loses the last commits although the client saw them succeed: a lock granted or a fencing token issued in them is forgotten, and the token is issued again",
				"ALTER SYSTEM SET synchronous_commit = on; SELECT pg_reload_conf(); and remove overrides: ALTER ROLE/DATABASE ... RESET synchronous_commit")
		}
		if set["pooling"] == "transaction" {
			add(SeverityRisk, s.Addr, "a pooler in transaction mode (PgBouncer's pool_mode = transaction or statement)",
				"leases, tokens and releases are single transactions and stay safe, but LISTEN runs on a server session the pooler hands to other clients: releases wake no waiter, and waiters wait for their next poll",
				"connect dlock to PostgreSQL directly, or through a pool in session mode (pool_mode = session)")
		}
		if set["fsync"] == "off" {
			add(SeverityBreaks, s.Addr, "fsync off",
				"a crash of the host can lose or corrupt committed data: locks and fencing tokens included",
				"ALTER SYSTEM SET fsync = on; SELECT pg_reload_conf();")
		}
		if v := set["innodb_flush_log_at_trx_commit"]; v != "" && v != "1" {
			add(SeverityBreaks, s.Addr, "innodb_flush_log_at_trx_commit "+v,
				"InnoDB writes its log to disk about once a second: a crash loses the last commits, so a lock granted or a fencing token issued in them is forgotten and the token is issued again",
				"SET GLOBAL innodb_flush_log_at_trx_commit = 1 (and in my.cnf)")
		}
		if v := set["sync_binlog"]; set["log_bin"] == "1" && v != "1" {
			add(SeverityBreaks, s.Addr, "log_bin on, sync_binlog "+v,
				"the binary log is not synced at each commit: a crash of the host loses its last commits, which replicas then never receive, and crash recovery, which keeps only the transactions the binary log has, rolls them back on this server too: a lock granted or a fencing token issued in them is forgotten",
				"SET GLOBAL sync_binlog = 1 (and in my.cnf), with innodb_flush_log_at_trx_commit = 1")
		}
		if v := set["nats-server"]; v != "" && !natsTTLs(v) {
			add(SeverityBreaks, s.Addr, "nats-server "+v,
				"servers before 2.11 have no per-message TTLs: a record's lease is not kept, so a dead holder's lock is never freed on the server's clock (the driver refuses such a server itself when it opens the bucket)",
				"upgrade every server of the cluster to nats-server 2.11 or later")
		}
		switch fix := "use a bucket of 3 or 5 replicas on a JetStream cluster of 3 or more servers: replicas=3 in the URL when the driver creates the bucket (nats stream edit KV_" + set["bucket"] + " --replicas 3 for an existing one)"; set["replicas"] {
		case "1":
			on := "a single server"
			if c := set["cluster"]; c != "" {
				on = "one server of the cluster " + c
			}
			add(SeverityRisk, s.Addr, fmt.Sprintf("bucket %s: 1 replica, on %s", set["bucket"], on),
				"the bucket lives on one server: while it is down no lock can be taken, refreshed or released (holders lose theirs), and a lost disk loses every hold and the stream's sequence, so fencing tokens start again from 1; not for correctness locks", fix)
		case "2":
			add(SeverityRisk, s.Addr, fmt.Sprintf("bucket %s: 2 replicas", set["bucket"]),
				"a majority of 2 is both: while either server is down no lock can be taken, refreshed or released (holders lose theirs), so the bucket is less available than one of a single replica", fix)
		}
		if set["storage"] == "memory" {
			add(SeverityBreaks, s.Addr, fmt.Sprintf("bucket %s: memory storage", set["bucket"]),
				"the bucket is kept in memory: a restart of its server (of a majority of its replicas) forgets every hold and the stream's sequence, so a held lock can be taken again and fencing tokens start again from 1",
				"make the bucket again with file storage (the driver creates it so: delete the bucket once no lock is held, or name another one in the URL)")
		}
		if v := set["sync_interval"]; v != "" && v != "always" {
			sev, whose := SeverityRisk, "a majority of the bucket's servers at once (one power supply, one zone)"
			if set["replicas"] == "1" {
				sev, whose = SeverityBreaks, "the bucket's server"
			}
			add(sev, s.Addr, "sync_interval "+v,
				"JetStream acknowledges a write before it is on disk and syncs every "+v+": a power loss or kernel crash of "+whose+" forgets the holds and tokens written since, so a held lock can be taken again and a fencing token issued twice (a process crash loses nothing)",
				"set jetstream { sync_interval: always } in the server's configuration (every write synced, at a cost in throughput), or replicas=3 across failure domains")
		}
		if v := set["version"]; v != "" && !etcdFixed(v) {
			add(SeverityBreaks, s.Addr, "etcd "+v,
				"this etcd release has known lease bugs (a leader paused and resumed can revoke sessions the new leader kept alive, etcd-io/etcd#15247): a lock can be granted while its holder's is still valid",
				"upgrade to etcd 3.5.13 or later (3.4.30 or later on 3.4)")
		}
		asked, granted := set["session_asked"], set["session_granted"]
		if granted == "" {
			granted = set["session_negotiated"]
		}
		if a, err := time.ParseDuration(asked); err == nil && granted != "" && granted != asked {
			g, _ := time.ParseDuration(granted)
			add(SeverityRisk, s.Addr, fmt.Sprintf("session asked %v, granted %v", a, g), sessionRisk(rep.scheme, a, g), sessionFix(rep.scheme, a, g))
		}
		if c := s.Clock; c != nil && c.Offset.Abs()-c.Bound > maxSkew {
			sev, risk := SeverityRisk, "leases expire on the store's clock, so they are safe, but times that compare the two clocks (dlock ls, logs, expiry times given to other systems) are off by as much"
			if !rep.Promises.ServerClock {
				sev, risk = SeverityBreaks, "leases of this backend expire on client clocks: a lock expires early or late by the skew, and two clients can hold it at once"
			}
			add(sev, s.Addr, fmt.Sprintf("clock %s ±%v from this host's (bound %v)", signed(c.Offset), fine(c.Bound), maxSkew), risk,
				"synchronise the clocks of the clients and servers with NTP (chrony)")
		}
	}
	return fs
}

// etcdFixed reports whether etcd version v is past the known lease bugs.
func etcdFixed(v string) bool {
	var major, minor, patch int
	if _, err := fmt.Sscanf(v, "%d.%d.%d", &major, &minor, &patch); err != nil {
		return false
	}
	if first, ok := fixedLeaseBugs[fmt.Sprintf("%d.%d", major, minor)]; ok {
		return patch >= first
	}
	return major > 3 || major == 3 && minor > 5
}

// natsTTLs reports whether nats-server version v has per-message TTLs
// (2.11 or later).
func natsTTLs(v string) bool {
	var major, minor int
	if _, err := fmt.Sscanf(v, "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major > 2 || major == 2 && minor >= 11
}

func sessionRisk(scheme string, asked, granted time.Duration) string {
	if granted < asked {
		return fmt.Sprintf("the server cut the session to %v (its maxSessionTimeout): a client that loses touch for %v loses its locks, sooner than the %v asked", granted, granted, asked)
	}
	what := "minSessionTimeout (two ticks)"
	if scheme == "etcd" || scheme == "etcds" {
		what = "election timeout (a lease lasts at least one and a half election timeouts)"
	}
	return fmt.Sprintf("the server's %s raised the session to %v: a client that dies keeps its locks %v, not the %v asked, before another can take them", what, granted, granted, asked)
}

func sessionFix(scheme string, asked, granted time.Duration) string {
	switch {
	case scheme == "etcd" || scheme == "etcds":
		return fmt.Sprintf("ask for session=%v or more, or run etcd with a shorter --election-timeout", granted)
	case granted < asked:
		return fmt.Sprintf("raise maxSessionTimeout in zoo.cfg to %v or more, or ask for session=%v", asked, granted)
	}
	return fmt.Sprintf("ask for session=%v or more, or lower tickTime in zoo.cfg", granted)
}

// signed formats d with its sign, to the microsecond under a millisecond.
func signed(d time.Duration) string {
	if d >= 0 {
		return "+" + fine(d)
	}
	return fine(d)
}

// fine formats d for the report, to the microsecond under a millisecond.
func fine(d time.Duration) string {
	if d.Abs() < time.Millisecond {
		return d.Round(time.Microsecond).String()
	}
	return seconds(d).String()
}

// WriteJSON writes the audit as one JSON object.
func (rep *AuditReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteText writes the audit for people.
func (rep *AuditReport) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "store     %s\npromises  %s\n", rep.Store, rep.Promises)
	if len(rep.Servers) == 0 {
		b.WriteString("\nnothing to read: the store keeps no settings that the audit checks\n")
	} else {
		fmt.Fprintf(&b, "\nread (clock: the server's minus this host's, ± the measurement's bound; a finding beyond %v)\n", rep.MaxSkew)
	}
	for _, s := range rep.Servers {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(s.Settings)) {
			v := s.Settings[k]
			if v == "" || strings.ContainsAny(v, " ,") {
				v = strconv.Quote(v)
			}
			parts = append(parts, k+"="+v)
		}
		if s.Clock != nil {
			parts = append(parts, fmt.Sprintf("clock=%s±%v", signed(s.Clock.Offset), fine(s.Clock.Bound)))
		}
		fmt.Fprintf(&b, "  %s  %s\n", s.Addr, strings.Join(parts, " "))
	}
	if len(rep.Findings) > 0 {
		b.WriteString("\nfindings\n")
	}
	breaks := 0
	for _, f := range rep.Findings {
		if f.Severity == SeverityBreaks {
			breaks++
		}
		where := f.Server
		if where == "" {
			where = "deployment"
		}
		fmt.Fprintf(&b, "  %-6s  %s: %s\n          what can go wrong: %s\n          fix: %s\n", f.Severity, where, f.Setting, f.Risk, f.Fix)
	}
	switch {
	case breaks > 0:
		fmt.Fprintf(&b, "\nFAIL: %s a promise of this backend\n", plural(breaks, "finding breaks", "findings break"))
	case len(rep.Findings) > 0:
		fmt.Fprintf(&b, "\nPASS: nothing breaks a promise of this backend (%s)\n", plural(len(rep.Findings), "risk", "risks"))
	default:
		b.WriteString("\nPASS: nothing found\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
