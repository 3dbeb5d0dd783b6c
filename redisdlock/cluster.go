package redisdlock

import (
	"context"
	"errors"
	"io"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterReloadInterval is how old a URL-opened Cluster client's slot map
// may grow before a command reloads it in the background (go-redis's
// default is a minute; a reload is one CLUSTER SLOTS).
const clusterReloadInterval = 5 * time.Second

// reloadOnConnError is a go-redis hook for a URL-opened Cluster client: a
// command that fails for want of an answer (the connection is refused,
// reset or times out: the master is dead or hung) reloads the slot map in
// the background, so that the client finds the replica promoted in its
// place as soon as the cluster has promoted it, not when the map ages out
// or a MOVED reply comes back. Reloads are coalesced by go-redis.
type reloadOnConnError struct{ c *redis.ClusterClient }

// DialHook implements redis.Hook.
func (h reloadOnConnError) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h reloadOnConnError) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.check(err)
		return err
	}
}

// ProcessPipelineHook implements redis.Hook.
func (h reloadOnConnError) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.check(err)
		return err
	}
}

func (h reloadOnConnError) check(err error) {
	if connError(err) {
		h.c.ReloadState(context.Background())
	}
}

// connError reports whether err is a failure to get an answer from a node
// in time, rather than the node's answer (a Redis error reply, a missing
// key) or the caller giving up.
func connError(err error) bool {
	var (
		re redis.Error
		ne net.Error
	)
	switch {
	case err == nil, errors.Is(err, redis.Nil), errors.As(err, &re):
		return false
	case errors.Is(err, context.Canceled):
		return false
	}
	return errors.As(err, &ne) || errors.Is(err, net.ErrClosed) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
