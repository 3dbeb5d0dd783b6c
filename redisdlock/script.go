package redisdlock

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock/driver"
)

// The scripts of Script mode. redis.Script runs them with EVALSHA and falls
// back to EVAL when the server answers NOSCRIPT (after a restart, a SCRIPT
// FLUSH or a failover to a server that never ran them).
var (
	//go:embed scripts/acquire.lua
	acquireSrc string
	//go:embed scripts/refresh.lua
	refreshSrc string
	//go:embed scripts/release.lua
	releaseSrc string
	//go:embed scripts/forcerelease.lua
	forceReleaseSrc string

	acquireScript      = redis.NewScript(acquireSrc)
	refreshScript      = redis.NewScript(refreshSrc)
	releaseScript      = redis.NewScript(releaseSrc)
	forceReleaseScript = redis.NewScript(forceReleaseSrc)
)

// Fields of the holder hash (Script and Transaction modes).
const (
	fieldOwner = "owner"
	fieldToken = "token"
	fieldInfo  = "info"
)

// scriptProto is Script mode.
type scriptProto struct{ d *Driver }

func ms(ttl time.Duration) int64 { return ttl.Milliseconds() }

func (p scriptProto) acquire(ctx context.Context, k layout, req driver.Request, ttl time.Duration) (driver.Result, error) {
	var c redis.Scripter = p.d.client
	var conn *redis.Conn
	if p.d.cfg.replicas > 0 {
		// WAIT counts the writes of one connection: run the script on a
		// connection of our own to the key's master, then WAIT there.
		node, err := p.d.master(ctx, k.lock)
		if err != nil {
			return driver.Result{}, err
		}
		conn = node.Conn()
		defer conn.Close()
		c = conn
	}
	v, err := acquireScript.Run(ctx, c, []string{k.lock, k.fence}, req.Owner, ms(ttl), req.Info).Int64Slice()
	if err != nil {
		return driver.Result{}, err
	}
	if len(v) != 2 {
		return driver.Result{}, fmt.Errorf("acquire script returned %v", v)
	}
	if v[0] == 0 {
		return driver.Result{RetryAfter: retryAfter(v[1])}, nil
	}
	if conn != nil {
		if err := p.d.awaitReplicas(ctx, conn); err != nil {
			return driver.Result{}, err
		}
	}
	return driver.Result{Acquired: true, Token: uint64(v[1])}, nil
}

func (p scriptProto) refresh(ctx context.Context, k layout, req driver.Request, ttl time.Duration) error {
	n, err := refreshScript.Run(ctx, p.d.client, []string{k.lock}, req.Owner, ms(ttl)).Int64()
	if err != nil {
		return err
	}
	if n == 0 {
		return driver.ErrNotHeld
	}
	return nil
}

func (p scriptProto) release(ctx context.Context, k layout, req driver.Request) error {
	n, err := releaseScript.Run(ctx, p.d.client, []string{k.lock}, req.Owner, k.channel).Int64()
	if err != nil {
		return err
	}
	if n == 0 {
		return driver.ErrNotHeld
	}
	return nil
}

func (p scriptProto) forceRelease(ctx context.Context, k layout) (int, error) {
	n, err := forceReleaseScript.Run(ctx, p.d.client, []string{k.lock}, k.channel).Int64()
	return int(n), err
}

func (p scriptProto) list(ctx context.Context, node *redis.Client, prefix string) ([]driver.Holder, error) {
	return listHashes(ctx, p.d, node, prefix)
}

func (p scriptProto) count(ctx context.Context, node *redis.Client, prefix string) (int, error) {
	return countHashes(ctx, p.d, node, prefix)
}

// hashPattern returns the SCAN pattern of the holder hashes of keys that
// start with prefix: {PREFIX+escaped...} — the closing brace leaves out the
// fencing counters.
func (d *Driver) hashPattern(prefix string) string {
	return "{" + globEscape(d.cfg.prefix+escapeKey(prefix)) + "*}"
}

// keyOfHash returns the user key of a holder hash name.
func (d *Driver) keyOfHash(name string) (string, bool) {
	p := "{" + d.cfg.prefix
	if !strings.HasPrefix(name, p) || !strings.HasSuffix(name, "}") || len(name) < len(p)+2 {
		return "", false
	}
	return unescapeKey(name[len(p) : len(name)-1])
}

// listHashes lists the live holders recorded in holder hashes on node
// (Script and Transaction modes).
func listHashes(ctx context.Context, d *Driver, node *redis.Client, prefix string) ([]driver.Holder, error) {
	var hs []driver.Holder
	err := scanKeys(ctx, node, d.hashPattern(prefix), func(names []string) error {
		type item struct {
			key  string
			all  *redis.MapStringStringCmd
			pttl *redis.DurationCmd
		}
		var items []item
		_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, name := range names {
				key, ok := d.keyOfHash(name)
				if !ok || !strings.HasPrefix(key, prefix) {
					continue
				}
				items = append(items, item{key: key, all: p.HGetAll(ctx, name), pttl: p.PTTL(ctx, name)})
			}
			return nil
		})
		if err != nil && !isWrongType(err) {
			return err
		}
		for _, it := range items {
			m, err := it.all.Result()
			if err != nil || m[fieldOwner] == "" {
				continue // gone meanwhile, or not a lock
			}
			ttl, err := it.pttl.Result()
			if err != nil || ttl <= 0 {
				continue // gone meanwhile, or no lease: not ours
			}
			tok, err := strconv.ParseUint(m[fieldToken], 10, 64)
			if err != nil {
				continue
			}
			hs = append(hs, driver.Holder{Key: it.key, Owner: m[fieldOwner], Mode: driver.Exclusive, Token: tok, Info: m[fieldInfo], TTL: ttl})
		}
		return nil
	})
	return hs, err
}

// countHashes counts the holder hashes on node (Script and Transaction
// modes).
func countHashes(ctx context.Context, d *Driver, node *redis.Client, prefix string) (int, error) {
	n := 0
	err := scanKeys(ctx, node, d.hashPattern(prefix), func(names []string) error {
		for _, name := range names {
			if key, ok := d.keyOfHash(name); ok && strings.HasPrefix(key, prefix) {
				n++
			}
		}
		return nil
	})
	return n, err
}

func isWrongType(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE")
}
