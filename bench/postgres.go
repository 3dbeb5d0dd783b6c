package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	"github.com/jackc/pgx/v5"
)

// pgConnsPerClient is how many server connections one dlock Client on
// PostgreSQL keeps while it waits or holds, one goroutine at a time: one
// from its pool and the one that waits in the key's line (and LISTENs for
// releases at its head).
const pgConnsPerClient = 2

// pgReserved are the server connections kept free of the libraries'
// clients: the bench's probe, the superuser reserve, a spare.
const pgReserved = 10

// pgURL is the dlock URL of the database "dlock" of the server at addr
// (host:port), as testsrv starts it.
func pgURL(addr string) string {
	return "postgres://postgres@" + addr + "/" + testsrv.DefaultDatabase + "?sslmode=disable"
}

// startPostgres starts a PostgreSQL server (testsrv's: trust
// authentication, fsync off) and reads its connection limit.
func startPostgres(ctx context.Context, cfg config) (*servers, error) {
	srv, err := testsrv.StartPostgres(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w (install PostgreSQL or leave pg out of -stores)", err)
	}
	s := started(srv)
	conn, err := pgx.Connect(ctx, pgURL(srv.Addr))
	if err != nil {
		s.stop()
		return nil, err
	}
	defer conn.Close(context.Background())
	var maxConns int
	if err := conn.QueryRow(ctx, "SELECT current_setting('max_connections')::int").Scan(&maxConns); err != nil {
		s.stop()
		return nil, err
	}
	s.maxClients = max(1, (maxConns-pgReserved)/pgConnsPerClient)
	return s, nil
}

// dlockPgOpen opens a dlock Client on PostgreSQL with dlock.Open (sqldlock,
// its defaults: a database/sql pool and a LISTEN connection per Client).
func dlockPgOpen(addrs []string, s settings) (locker, func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	c, err := dlock.Open(ctx, pgURL(addrs[0]), dlock.WithDefaultTTL(s.ttl))
	if err != nil {
		return nil, nil, err
	}
	return dlockLocker{c}, func() { c.Close() }, nil
}

// pgProbe pings the server on a connection of its own and reads the CPU
// time of its processes from /proc.
type pgProbe struct {
	conn *pgx.Conn
	pid  int
}

func newPgProbe(addrs, _ []string, pids []int, _ settings) (probe, error) {
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgURL(addrs[0]))
	if err != nil {
		return nil, err
	}
	return &pgProbe{conn, pids[0]}, nil
}

func (p *pgProbe) ping(ctx context.Context) error { return p.conn.Ping(ctx) }

func (p *pgProbe) serverCPU(context.Context) time.Duration { return procTreeCPU(p.pid) }

func (p *pgProbe) records(context.Context) (int, error) { return 0, errNoRecords }

func (p *pgProbe) close() { p.conn.Close(context.Background()) }

// clockTick is the unit of the CPU times in /proc/<pid>/stat (USER_HZ,
// 100 on Linux).
const clockTick = 10 * time.Millisecond

// procTreeCPU returns the CPU time (user + system, all threads) that the
// process pid and its children have used, from /proc: the process's own
// time, its reaped children's, and that of its children still running
// (PostgreSQL's backends are children of the postmaster). 0 if pid is 0 or
// /proc cannot be read. The resolution is a clock tick (10 ms).
func procTreeCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	f, ok := procStat(pid)
	if !ok {
		return 0
	}
	ticks := f.utime + f.stime + f.cutime + f.cstime
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil || child == pid {
			continue
		}
		if c, ok := procStat(child); ok && c.ppid == pid {
			ticks += c.utime + c.stime
		}
	}
	return time.Duration(ticks) * clockTick
}

type procFields struct {
	ppid                         int
	utime, stime, cutime, cstime int64
}

// procStat reads /proc/<pid>/stat.
func procStat(pid int) (procFields, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procFields{}, false
	}
	// The command name, in parentheses, may hold spaces: the fields
	// after it start at the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procFields{}, false
	}
	fs := strings.Fields(s[i+1:])
	// fs[0] is field 3 (state): ppid is field 4, utime..cstime 14-17.
	if len(fs) < 15 {
		return procFields{}, false
	}
	n := func(k int) int64 { v, _ := strconv.ParseInt(fs[k-3], 10, 64); return v }
	return procFields{ppid: int(n(4)), utime: n(14), stime: n(15), cutime: n(16), cstime: n(17)}, true
}
