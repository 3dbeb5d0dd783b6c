package redisdlock

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock/driver"
)

// The scripts of Script mode. The driver runs them with EVALSHA and falls
// back to EVAL when the server answers NOSCRIPT (after a restart, a SCRIPT
// FLUSH or a failover to a server that never ran them). The code of the
// general form (scripts/common.lua) is spliced into each script after its
// fast path.
var (
	//go:embed scripts/common.lua
	commonSrc string
	//go:embed scripts/acquire.lua
	acquireSrc string
	//go:embed scripts/refresh.lua
	refreshSrc string
	//go:embed scripts/release.lua
	releaseSrc string
	//go:embed scripts/forcerelease.lua
	forceReleaseSrc string
	//go:embed scripts/acquireall.lua
	acquireAllSrc string
	//go:embed scripts/raise.lua
	raiseSrc string
	//go:embed scripts/readhold.lua
	readHoldSrc string

	acquireScript      = newScript(acquireSrc)
	refreshScript      = newScript(refreshSrc)
	releaseScript      = newScript(releaseSrc)
	forceReleaseScript = newScript(forceReleaseSrc)
	acquireAllScript   = newScript(acquireAllSrc)
	raiseScript        = plainScript(raiseSrc)
	readHoldScript     = plainScript(readHoldSrc)
)

// script is a script of Script mode: its source and the SHA1 digest
// EVALSHA names it by.
type script struct{ src, sha string }

// commonMark is the line of a script that common.lua replaces.
const commonMark = "-- @common\n"

func newScript(src string) *script {
	if strings.Count(src, commonMark) != 1 {
		panic("redisdlock: a script lacks its " + strings.TrimSpace(commonMark) + " line")
	}
	return plainScript(strings.Replace(src, commonMark, commonSrc, 1))
}

// plainScript is newScript for a script without common.lua.
func plainScript(src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(sum[:])}
}

// goredisEval runs scripts on the driver's go-redis client.
type goredisEval struct{ d *Driver }

// processor is what a go-redis command runs on: a client, its
// AutoPipeliner, or one of its connections.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// eval runs s and returns its reply, a list of integers (an integer reply
// is returned as a list of one). With ack, a reply that starts with 1
// (written) is returned once the replicas that WithReplicaAck asks for have
// acknowledged the write; if they do not, the error is an *ackError.
// keys[0] names the server.
func (e goredisEval) eval(ctx context.Context, s *script, keys, args []string, ack bool) ([]int64, error) {
	var (
		p    processor
		conn *redis.Conn
		err  error
	)
	if ack {
		// WAIT counts the writes of one connection, so the script and
		// the WAIT must share it.
		node, err := e.d.master(ctx, keys[0])
		if err != nil {
			return nil, err
		}
		conn = node.Conn()
		defer conn.Close()
		p = conn
	} else {
		// A script that finds none of the driver's others on their way
		// goes out at once as a command of its own: the AutoPipeliner
		// would hand it to a goroutine of its own and gain nothing.
		n := e.d.running.Add(1)
		defer e.d.running.Add(-1)
		if p, err = e.d.scripter(n > 1); err != nil {
			return nil, err
		}
	}
	r, err := s.run(ctx, p, keys, args)
	if err != nil {
		return nil, err
	}
	var v []int64
	switch r := r.(type) {
	case int64:
		v = []int64{r}
	case []any:
		v = make([]int64, len(r))
		for i, x := range r {
			n, ok := x.(int64)
			if !ok {
				return nil, fmt.Errorf("script returned %v", r)
			}
			v[i] = n
		}
	default:
		return nil, fmt.Errorf("script returned %v", r)
	}
	if ack && len(v) > 0 && v[0] == 1 {
		if err := e.d.awaitReplicas(ctx, conn); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// run runs s on p with EVALSHA, and with EVAL if the server does not
// have the script (NOSCRIPT: after a restart, a SCRIPT FLUSH or a
// failover to a server that never ran it).
func (s *script) run(ctx context.Context, p processor, keys, args []string) (any, error) {
	r, err := evalCmd(ctx, p, false, s.sha, keys, args)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		r, err = evalCmd(ctx, p, true, s.src, keys, args)
	}
	return r, err
}

// evalCmd runs EVALSHA of script (a digest), or with src EVAL of script
// (the source), on p, as a scriptCmd. The
// script, keys and arguments go as strArgs, so that hooks and traces that
// print a command (Cmd.String) show them as they are, and a call with up to
// evalSmall of them allocates one block for all its arguments.
func evalCmd(ctx context.Context, p processor, src bool, script string, keys, args []string) (any, error) {
	n := 1 + len(keys) + len(args)
	var (
		strs []string
		a    []any
	)
	if n <= evalSmall {
		b := new(evalArgs)
		strs, a = b.strs[:0], b.args[:0]
	} else {
		strs, a = make([]string, 0, n), make([]any, 0, 2+n)
	}
	strs = append(append(append(strs, script), keys...), args...)
	if src {
		a = append(a, "eval")
	} else {
		a = append(a, "evalsha")
	}
	a = append(a, strArg{&strs[0]}, len(keys))
	for i := range strs[1:] {
		a = append(a, strArg{&strs[1+i]})
	}
	cmd := redis.NewCmd(ctx, a...)
	cmd.SetFirstKeyPos(3)
	_ = p.Process(ctx, scriptCmd{cmd})
	return cmd.Result()
}

// evalSmall is the number of strings (script, keys, arguments) of a
// script call whose arguments fit in an evalArgs.
const evalSmall = 8

// evalArgs holds the arguments of a script call in one allocation: the
// strings, and the command's arguments that refer to them.
type evalArgs struct {
	strs [evalSmall]string
	args [2 + evalSmall]any
}

// strArg is a string argument of a command, held by reference: unlike a
// string, it goes into an interface without a copy on the heap. go-redis
// writes it as its bytes (MarshalBinary), and prints it as it is (String).
type strArg struct{ s *string }

// MarshalBinary returns the string's bytes, which go-redis only copies to
// the connection: they must not be modified.
func (a strArg) MarshalBinary() ([]byte, error) {
	return unsafe.Slice(unsafe.StringData(*a.s), len(*a.s)), nil
}

func (a strArg) String() string { return *a.s }

// scriptCmd is a command that go-redis never sends twice, whatever the
// client's MaxRetries (or a Cluster client's MaxRedirects) say: after a
// network error the server may have run it, and a release run twice
// reports "not held" for a lock it released. dlock retries on its own.
// MOVED and ASK replies, which the server sends instead of running the
// command, are still followed.
type scriptCmd struct{ *redis.Cmd }

// NoRetry implements redis.Cmder.
func (scriptCmd) NoRetry() bool { return true }

// The owner field of a lock hash in the general form: markers that no
// owner can be (they start with a NUL byte; see scripts/common.lua).
const (
	markRW  = "\x00rw"  // exclusive and shared holds, waiters
	markSem = "\x00sem" // semaphore permits, waiters
)

// modeArg is the mode argument of the acquire script.
func modeArg(m driver.Mode) string {
	switch m {
	case driver.Shared:
		return "r"
	case driver.Semaphore:
		return "s"
	}
	return "x"
}

// keys returns the KEYS of the scripts that take all five keys of a lock
// (acquireall.lua, forcerelease.lua), in the order they expect. The
// acquire, refresh and release scripts take the hash (and acquire the
// counter) and name the other keys after the hash, with the suffixes of
// keys.go.
func (k layout) keys() []string {
	return []string{k.lock, k.fence, k.holders, k.queue, k.qexp}
}

// Fields of the holder hash (Script and Transaction modes).
const (
	fieldOwner = "owner"
	fieldToken = "token"
	fieldInfo  = "info"
	fieldLimit = "limit" // the general form of a semaphore
	// fieldListen marks a hold in the simple form that a waiter which
	// does not queue found held: its release publishes on the lock's
	// channel (scripts/release.lua).
	fieldListen = "l"
)

// scriptProto is Script mode.
type scriptProto struct{ d *Driver }

func ms(ttl time.Duration) int64 { return ttl.Milliseconds() }

// acquire runs the acquire script for req on the keys of k, with the
// lease ttl; a queued request that is refused records the lock's fencing
// counter, against which a hold handed to it later is checked (see
// grants.go).
func (p scriptProto) acquire(ctx context.Context, k layout, req driver.Request, ttl time.Duration) (driver.Result, error) {
	queue := "0"
	if req.Queue {
		queue = "1"
		if p.d.queuers.ask(req.Owner, ttl) {
			queue = "2" // never asked to queue: no place to have lost
		}
	}
	// The fast path reads the hash and the counter only: the other keys
	// are named after the hash inside the script, and the limit is sent
	// for semaphores only.
	keys := []string{k.lock, k.fence}
	args := []string{req.Owner, msArg(ttl), req.Info, modeArg(req.Mode), queue}
	if req.Mode == driver.Semaphore {
		args = append(args, strconv.Itoa(req.Limit))
	}
	v, err := p.d.ev.eval(ctx, acquireScript, keys, args, p.d.cfg.replicas > 0)
	if err != nil {
		return driver.Result{}, err
	}
	switch {
	case len(v) == 1 && v[0] == -1:
		return driver.Result{}, fmt.Errorf("the queue entry expired while waiting: %w", driver.ErrNotOwner)
	case len(v) == 3 && v[0] == -2:
		return driver.Result{}, mismatch(req, v[1], v[2])
	case len(v) == 3 && v[0] == 0 && req.Queue:
		p.d.queuers.refused(req.Owner, v[2])
		return driver.Result{RetryAfter: retryAfter(v[1])}, nil
	case len(v) != 2:
		return driver.Result{}, fmt.Errorf("acquire script returned %v", v)
	case v[0] == 0:
		return driver.Result{RetryAfter: retryAfter(v[1])}, nil
	}
	if req.Queue {
		p.d.queuers.forget(req.Owner) // admitted: its entry is gone
	}
	return driver.Result{Acquired: true, Token: uint64(v[1])}, nil
}

// msArg is a lease as a script argument: whole milliseconds.
func msArg(ttl time.Duration) string { return strconv.FormatInt(ms(ttl), 10) }

// queuers are the owners that an Acquire of the driver has asked to queue
// (Request.Queue) and that have not been admitted or released since. Only
// such an owner can have a place in the queue to lose, which the acquire
// script checks (a ZSCORE) before it takes a free lock; an owner asked to
// queue for the first time is spared the check. An owner is forgotten when
// it is admitted or released, or, should neither come, once the server has
// forgotten its entry for certain (see ask).
type queuers struct {
	mu    sync.Mutex
	until map[string]queuer // by owner
	sweep int               // size of until at which ask drops the entries past
}

// queuer is what queuers keep of an owner.
type queuer struct {
	until time.Time // when the server has forgotten its entry
	// fence is the lock's fencing counter when the owner's latest Acquire
	// that the server answered was refused: a hold handed to the owner
	// with a larger token was handed after that Acquire was sent.
	fence int64
}

// queueMemory bounds how long the server remembers a queue entry after
// its lease: a minute (GONE in scripts/common.lua), and a minute of margin
// for requests delayed on their way.
const queueMemory = 2 * time.Minute

// ask records that owner is about to be asked to queue with a lease of ttl,
// and reports whether it was not recorded already.
func (q *queuers) ask(owner string, ttl time.Duration) (first bool) {
	now := time.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.until == nil {
		q.until = map[string]queuer{}
	}
	e, seen := q.until[owner]
	e.until = now.Add(ttl + queueMemory)
	q.until[owner] = e
	if len(q.until) >= q.sweep {
		for o, e := range q.until {
			if now.After(e.until) {
				delete(q.until, o)
			}
		}
		q.sweep = max(2*len(q.until), 64)
	}
	return !seen
}

// refused records the fencing counter fence that a refused Acquire of owner
// read.
func (q *queuers) refused(owner string, fence int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e, ok := q.until[owner]; ok {
		e.fence = fence
		q.until[owner] = e
	}
}

// granted reports whether a hold with token, handed to owner, came after
// owner's latest refused Acquire, and forgets owner if so (it holds the
// lock: its entry is gone).
func (q *queuers) granted(owner string, token int64) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	e, ok := q.until[owner]
	if !ok || token <= e.fence {
		return false
	}
	delete(q.until, owner)
	return true
}

// forget drops owner.
func (q *queuers) forget(owner string) {
	q.mu.Lock()
	delete(q.until, owner)
	q.mu.Unlock()
}

// acquireAll takes every lock of reqs in one script, or none: the locks'
// keys all live on one server (and one Cluster slot).
func (p scriptProto) acquireAll(ctx context.Context, ks []layout, reqs []driver.Request, ttls []time.Duration) (driver.MultiResult, error) {
	keys := make([]string, 0, 5*len(reqs))
	args := make([]string, 0, 5*len(reqs))
	for i, req := range reqs {
		keys = append(keys, ks[i].keys()...)
		args = append(args, req.Owner, msArg(ttls[i]), req.Info, modeArg(req.Mode), strconv.Itoa(req.Limit))
	}
	v, err := p.d.ev.eval(ctx, acquireAllScript, keys, args, p.d.cfg.replicas > 0)
	if err != nil {
		return driver.MultiResult{}, err
	}
	at := func(i int64) (int, error) {
		if i < 1 || int(i) > len(reqs) {
			return 0, fmt.Errorf("acquire-all script returned %v", v)
		}
		return int(i - 1), nil
	}
	switch {
	case len(v) == 4 && v[0] == -2:
		i, err := at(v[1])
		if err != nil {
			return driver.MultiResult{}, err
		}
		return driver.MultiResult{}, fmt.Errorf("%q: %w", reqs[i].Key, mismatch(reqs[i], v[2], v[3]))
	case len(v) == 3 && v[0] == 0:
		i, err := at(v[1])
		if err != nil {
			return driver.MultiResult{}, err
		}
		return driver.MultiResult{Blocked: i, RetryAfter: retryAfter(v[2])}, nil
	case len(v) != len(reqs)+1 || v[0] != 1:
		return driver.MultiResult{}, fmt.Errorf("acquire-all script returned %v", v)
	}
	res := driver.MultiResult{Acquired: true, Results: make([]driver.Result, len(reqs))}
	for i, tok := range v[1:] {
		res.Results[i] = driver.Result{Acquired: true, Token: uint64(tok)}
	}
	return res, nil
}

// mismatch is the error of an acquire script that found the lock in use
// as another mode (code 0: exclusive or shared, 1: shared by req.Owner, 2:
// a semaphore of limit).
func mismatch(req driver.Request, code, limit int64) error {
	var held string
	switch code {
	case 1:
		held = "held shared by this owner (an upgrade)"
	case 2:
		held = fmt.Sprintf("in use as a semaphore of %d permits", limit)
	default:
		held = "in use as an exclusive or shared lock"
	}
	asked := req.Mode.String()
	if req.Mode == driver.Semaphore {
		asked = fmt.Sprintf("a semaphore of %d permits", req.Limit)
	}
	return fmt.Errorf("the lock is %s, asked for %s: %w", held, asked, driver.ErrModeMismatch)
}

func (p scriptProto) refresh(ctx context.Context, k layout, req driver.Request, ttl time.Duration) error {
	return owned(p.d.ev.eval(ctx, refreshScript, []string{k.lock}, []string{req.Owner, msArg(ttl)}, false))
}

func (p scriptProto) readHold(ctx context.Context, k layout, key, owner string) (driver.Holder, error) {
	v, err := p.d.ev.eval(ctx, readHoldScript, []string{k.lock}, []string{owner}, false)
	switch {
	case err != nil:
		return driver.Holder{}, err
	case len(v) == 0:
		return driver.Holder{}, driver.ErrNotOwner
	case len(v) != 4:
		return driver.Holder{}, fmt.Errorf("read-hold script returned %v", v)
	}
	return driver.Holder{Key: key, Owner: owner, Token: uint64(v[0]), Mode: driver.Mode(v[1]), Limit: int(v[2]), TTL: time.Duration(v[3]) * time.Millisecond}, nil
}

func (p scriptProto) release(ctx context.Context, k layout, req driver.Request) error {
	p.d.queuers.forget(req.Owner)
	return owned(p.d.ev.eval(ctx, releaseScript, []string{k.lock}, []string{req.Owner}, false))
}

// owned turns the reply of the refresh and release scripts (1: done, 0:
// the owner does not hold the lock) into an error.
func owned(v []int64, err error) error {
	switch {
	case err != nil:
		return err
	case len(v) != 1:
		return fmt.Errorf("script returned %v", v)
	case v[0] == 0:
		return driver.ErrNotOwner
	}
	return nil
}

func (p scriptProto) forceRelease(ctx context.Context, k layout) (int, error) {
	v, err := p.d.ev.eval(ctx, forceReleaseScript, k.keys(), []string{k.channel}, false)
	if err != nil {
		return 0, err
	}
	if len(v) != 1 {
		return 0, fmt.Errorf("force-release script returned %v", v)
	}
	return int(v[0]), nil
}

func (p scriptProto) list(ctx context.Context, node *redis.Client, prefix string) ([]driver.Holder, error) {
	return listHashes(ctx, p.d, node, prefix)
}

func (p scriptProto) count(ctx context.Context, node *redis.Client, prefix string) (int, error) {
	return countHashes(ctx, p.d, node, prefix)
}

// scanHashes calls fn with batches of the names of the lock hashes whose
// keys may start with prefix (Script and Transaction modes), found by scan
// (SCAN on one server) with two patterns: {PREFIX+ESC(prefix)*} for keys
// without a hash tag, and {PREFIX*}{ESC(prefix)*} for keys with one (see
// Driver.base). fn checks each name with keyOfHash.
func (d *Driver) scanHashes(prefix string, scan func(pattern string, fn func(keys []string) error) error, fn func(names []string) error) error {
	untagged := "{" + globEscape(d.cfg.prefix+escapeKey(prefix)) + "*}"
	tagged := "{" + globEscape(d.cfg.prefix) + "*}{" + globEscape(escapeKey(prefix)) + "*}"
	err := scan(untagged, func(names []string) error {
		// The pattern also matches some names of the tagged form,
		// which the second SCAN finds.
		return fn(slices.DeleteFunc(names, func(n string) bool { return strings.Contains(n, "}{") }))
	})
	if err != nil {
		return err
	}
	return scan(tagged, fn)
}

// goredisScan is scanHashes's scan on node.
func goredisScan(ctx context.Context, node *redis.Client) func(string, func([]string) error) error {
	return func(pattern string, fn func([]string) error) error { return scanKeys(ctx, node, pattern, fn) }
}

// keyOfHash returns the user key of a lock hash name.
func (d *Driver) keyOfHash(name string) (string, bool) {
	p := "{" + d.cfg.prefix
	if !strings.HasPrefix(name, p) || !strings.HasSuffix(name, "}") {
		return "", false
	}
	esc := name[len(p) : len(name)-1]
	if i := strings.LastIndexByte(esc, '{'); i >= 0 {
		esc = esc[i+1:] // the tagged form: ESC(KEY) is in the last braces
	}
	key, ok := unescapeKey(esc)
	if !ok || key == "" || d.base(key) != name {
		return "", false
	}
	return key, true
}

// listHashes lists the live holders recorded in lock hashes on node
// (Script and Transaction modes).
func listHashes(ctx context.Context, d *Driver, node *redis.Client, prefix string) ([]driver.Holder, error) {
	var hs []driver.Holder
	err := d.scanHashes(prefix, goredisScan(ctx, node), func(names []string) error {
		type item struct {
			key     string
			all     *redis.MapStringStringCmd
			pttl    *redis.DurationCmd
			holders *redis.ZSliceCmd
		}
		var (
			items []item
			clock *redis.TimeCmd
		)
		_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, name := range names {
				key, ok := d.keyOfHash(name)
				if !ok || !strings.HasPrefix(key, prefix) {
					continue
				}
				items = append(items, item{
					key:     key,
					all:     p.HGetAll(ctx, name),
					pttl:    p.PTTL(ctx, name),
					holders: p.ZRangeWithScores(ctx, name+holdersSuffix, 0, -1),
				})
			}
			clock = p.Time(ctx)
			return nil
		})
		if err != nil && !isWrongType(err) {
			return err
		}
		now, err := clock.Result()
		if err != nil {
			return err
		}
		for _, it := range items {
			m, err := it.all.Result()
			if err != nil {
				continue // not a lock
			}
			ttl, err := it.pttl.Result()
			if err != nil {
				continue
			}
			zs, _ := it.holders.Result()
			members := make([]scored, len(zs))
			for i, z := range zs {
				o, _ := z.Member.(string)
				members[i] = scored{o, z.Score}
			}
			hs = append(hs, holdersOf(it.key, m, ttl, members, now)...)
		}
		return nil
	})
	return hs, err
}

// scored is a member of a sorted set with its score.
type scored struct {
	member string
	score  float64
}

// holdersOf returns the live holders that the lock hash of key records: m
// is the hash, ttl its PTTL, members its holders zset (scored by expiry in
// Unix milliseconds), now the server's clock. It is the owner of a hash
// in the simple form, the members of the holders zset of one in the
// general form; a hash gone meanwhile, or that is not a lock, has none.
func holdersOf(key string, m map[string]string, ttl time.Duration, members []scored, now time.Time) []driver.Holder {
	if m[fieldOwner] == "" || ttl <= 0 {
		return nil // gone meanwhile, no lease or not a lock: not ours
	}
	var hs []driver.Holder
	switch owner := m[fieldOwner]; owner {
	case markRW, markSem:
		for _, z := range members {
			o := z.member
			left := time.UnixMilli(int64(z.score)).Sub(now)
			tok, err := strconv.ParseUint(m["t:"+o], 10, 64)
			if left <= 0 || err != nil {
				continue
			}
			h := driver.Holder{Key: key, Owner: o, Mode: driver.Semaphore, Token: tok, Info: m["i:"+o], TTL: left}
			if owner == markRW {
				h.Mode = driver.Shared
				if m["m:"+o] == "x" {
					h.Mode = driver.Exclusive
				}
			} else {
				h.Limit, _ = strconv.Atoi(m[fieldLimit])
			}
			hs = append(hs, h)
		}
	default:
		tok, err := strconv.ParseUint(m[fieldToken], 10, 64)
		if err != nil {
			return nil
		}
		hs = append(hs, driver.Holder{Key: key, Owner: owner, Mode: driver.Exclusive, Token: tok, Info: m[fieldInfo], TTL: ttl})
	}
	return hs
}

// countHashes counts the records of the locks on node (Script and
// Transaction modes): see records.
func countHashes(ctx context.Context, d *Driver, node *redis.Client, prefix string) (int, error) {
	n := 0
	err := d.scanHashes(prefix, goredisScan(ctx, node), func(names []string) error {
		type item struct {
			owner           *redis.StringCmd
			holders, queued *redis.IntCmd
		}
		var items []item
		_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, name := range names {
				if key, ok := d.keyOfHash(name); ok && strings.HasPrefix(key, prefix) {
					items = append(items, item{
						owner:   p.HGet(ctx, name, fieldOwner),
						holders: p.ZCard(ctx, name+holdersSuffix),
						queued:  p.ZCard(ctx, name+queueSuffix),
					})
				}
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) && !isWrongType(err) {
			return err
		}
		for _, it := range items {
			n += records(it.owner.Val(), it.holders.Val(), it.queued.Val())
		}
		return nil
	})
	return n, err
}

// records is the number of records of a lock whose hash has owner in its
// owner field and whose holders and queue zsets have the given sizes: one
// for a lock in the simple form, its holders and waiters for one in the
// general form, live or expired but not yet removed; none for a hash gone
// meanwhile or that is not a lock.
func records(owner string, holders, queued int64) int {
	switch owner {
	case "":
		return 0
	case markRW, markSem:
		return int(holders + queued)
	}
	return 1
}

func isWrongType(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE")
}
