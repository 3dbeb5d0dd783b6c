package check

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/dlockhq/dlock"
)

// workerConfig is what the parent sends a worker, as one JSON line on its
// standard input: not in its arguments, where other users of the host could
// read a password in the URL.
type workerConfig struct {
	ID        int           `json:"id"`
	URL       string        `json:"url"`
	Resource  string        `json:"resource,omitempty"` // the --resource URL; empty: the lock store
	Key       string        `json:"key"`
	TTL       time.Duration `json:"ttl"`
	LockDelay time.Duration `json:"lock_delay,omitempty"`
	Hold      time.Duration `json:"hold,omitempty"`
}

// Kinds of the events a worker reports.
const (
	evReady    = "ready"    // the worker's clients are open
	evAcquired = "acquired" // Token, Valid: the lock's deadline
	evRead     = "read"     // N: the counter read
	evWrote    = "wrote"    // N: the value written; OK: acknowledged
	evFenced   = "fenced"   // Token, Start: when the write was sent; OK: accepted
	evLost     = "lost"     // the lock's context ended with ErrLost
	evReleased = "released" // At: when Release was called; Err: "lost" if it reported ErrLost
	evError    = "error"    // Err: a failed acquisition or resource request
)

// opTimeout bounds each request to the protected resource. It is not the
// lock's context: a worker goes on with its read-modify-write and its
// fenced write after its lock was lost, as a process paused in the middle
// of its work does, so that the check shows what happens to the resource
// then (the lost signal is recorded all the same).
const opTimeout = 30 * time.Second

// event is one line a worker writes on its standard output. Times are
// CLOCK_MONOTONIC nanoseconds.
type event struct {
	Kind  string `json:"k"`
	Hold  int    `json:"h,omitempty"`
	At    int64  `json:"t"`
	Start int64  `json:"s,omitempty"`
	Valid int64  `json:"v,omitempty"`
	Token uint64 `json:"tok,omitempty"`
	N     int64  `json:"n,omitempty"`
	OK    bool   `json:"ok,omitempty"`
	Err   string `json:"err,omitempty"`
}

// Worker runs one worker process of a check: it reads its configuration
// from in, runs the workload until in ends (the parent closes it to stop
// the worker) and reports what it does on out, one JSON event a line.
func Worker(in io.Reader, out io.Writer) error {
	br := bufio.NewReader(in)
	line, err := br.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("reading the configuration: %w", err)
	}
	var cfg workerConfig
	if err := json.Unmarshal(line, &cfg); err != nil {
		return fmt.Errorf("bad configuration: %w", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		_, _ = io.Copy(io.Discard, br)
		stop()
	}()
	var mu sync.Mutex
	enc := json.NewEncoder(out)
	emit := func(e event) {
		if e.At == 0 {
			e.At = monoNow()
		}
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(e)
	}

	c, err := dlock.Open(ctx, cfg.URL, dlock.WithOwnerInfo(fmt.Sprintf("dlock check worker %d", cfg.ID)))
	if err != nil {
		return err
	}
	defer c.Close()
	res, closeRes, err := openResourceAt(ctx, cfg.URL, cfg.Resource, c)
	if err != nil {
		return err
	}
	defer closeRes()
	emit(event{Kind: evReady})

	for hold := 1; ctx.Err() == nil; hold++ {
		l, err := c.Lock(ctx, cfg.Key, dlock.WithTTL(cfg.TTL), dlock.WithLockDelay(cfg.LockDelay))
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			emit(event{Kind: evError, Hold: hold, Err: "acquire: " + err.Error()})
			select {
			case <-ctx.Done():
			case <-time.After(cfg.TTL / 10):
			}
			continue
		}
		emit(event{Kind: evAcquired, Hold: hold, Token: l.Token(), Valid: mono(l.ValidUntil())})
		lctx := l.Context()
		stopWatch := context.AfterFunc(lctx, func() {
			if errors.Is(context.Cause(lctx), dlock.ErrLost) {
				emit(event{Kind: evLost, Hold: hold, Valid: mono(l.ValidUntil())})
			}
		})
		octx, cancel := context.WithTimeout(context.Background(), opTimeout)
		work(octx, res, hold, l.Token(), cfg.Hold, emit)
		cancel()
		at := monoNow()
		rctx, cancel := context.WithTimeout(context.Background(), cfg.TTL+dlock.ReleaseTimeout)
		err = l.Release(rctx)
		cancel()
		stopWatch()
		e := event{Kind: evReleased, Hold: hold, At: at, Valid: mono(l.ValidUntil())}
		switch {
		case errors.Is(err, dlock.ErrLost):
			e.Err = "lost"
		case err != nil:
			e.Err = err.Error()
		}
		emit(e)
	}
	return nil
}

// work is one critical section: read the counter, write it plus one, and
// write the token to the fenced register. It spends think between the read
// and the write, as a holder doing work does.
func work(ctx context.Context, res resource, hold int, token uint64, think time.Duration, emit func(event)) {
	v, err := res.read(ctx)
	if err != nil {
		emit(event{Kind: evError, Hold: hold, Err: "read: " + err.Error()})
		return
	}
	emit(event{Kind: evRead, Hold: hold, N: v})
	if think > 0 {
		time.Sleep(think)
	}
	err = res.write(ctx, v+1)
	emit(event{Kind: evWrote, Hold: hold, N: v + 1, OK: err == nil})
	if err != nil {
		return
	}
	start := monoNow()
	ok, err := res.fence(ctx, token)
	e := event{Kind: evFenced, Hold: hold, Start: start, Token: token, OK: ok}
	if err != nil {
		e.Err = err.Error()
	}
	emit(e)
}

// openResourceAt opens the resource at rawURL, or if rawURL is empty in the
// lock store at lockURL, whose Client is c, and returns a function that
// closes it (and the Client opened for it).
func openResourceAt(ctx context.Context, lockURL, rawURL string, c *dlock.Client) (resource, func(), error) {
	if rawURL == "" {
		r, err := openResource(ctx, lockURL, c.Driver())
		if err != nil {
			return nil, nil, err
		}
		return r, func() { r.close() }, nil
	}
	rc, err := dlock.Open(ctx, rawURL)
	if errors.Is(err, dlock.ErrInvalidArgument) {
		return nil, nil, usagef("invalid --resource: %s", strings.TrimPrefix(err.Error(), "dlock: "))
	}
	if err != nil {
		return nil, nil, fmt.Errorf("the resource store: %s", strings.TrimPrefix(err.Error(), "dlock: "))
	}
	r, err := openResource(ctx, rawURL, rc.Driver())
	if err != nil {
		rc.Close()
		return nil, nil, fmt.Errorf("the resource store: %w", err)
	}
	return r, func() { r.close(); rc.Close() }, nil
}
