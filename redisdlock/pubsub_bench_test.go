package redisdlock_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// BenchmarkClusterPubSub measures what the choice of PUBLISH over sharded
// pub/sub costs in a Cluster: the time from a publish to its delivery, with
// the subscriber on the publishing node or on another one (PUBLISH), and
// with SPUBLISH/SSUBSCRIBE on the channel's shard; and the rate of
// publishes one client sustains (PUBLISH is forwarded to every node over
// the cluster bus, SPUBLISH to the shard only).
func BenchmarkClusterPubSub(b *testing.B) {
	srv := testsrv.Get(b, testsrv.RedisCluster)
	ctx := context.Background()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: srv.Addrs})
	defer cc.Close()
	const channel = "{bench-pubsub}:released"
	owner, err := cc.MasterForKey(ctx, channel)
	if err != nil {
		b.Fatal(err)
	}
	var other *redis.Client
	for _, addr := range srv.Addrs {
		if addr != owner.Options().Addr {
			other = redis.NewClient(&redis.Options{Addr: addr})
			defer other.Close()
			break
		}
	}
	roundTrip := func(b *testing.B, sub *redis.PubSub, publish func() error) {
		if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
			b.Fatal(err)
		}
		b.ResetTimer()
		for range b.N {
			if err := publish(); err != nil {
				b.Fatal(err)
			}
			if _, err := sub.ReceiveMessage(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("latency/PUBLISH/subscriber-on-other-node", func(b *testing.B) {
		sub := other.Subscribe(ctx, channel)
		defer sub.Close()
		roundTrip(b, sub, func() error { return owner.Publish(ctx, channel, "").Err() })
	})
	b.Run("latency/PUBLISH/subscriber-on-same-node", func(b *testing.B) {
		sub := owner.Subscribe(ctx, channel)
		defer sub.Close()
		roundTrip(b, sub, func() error { return owner.Publish(ctx, channel, "").Err() })
	})
	b.Run("latency/SPUBLISH", func(b *testing.B) {
		sub := owner.SSubscribe(ctx, channel)
		defer sub.Close()
		roundTrip(b, sub, func() error { return owner.SPublish(ctx, channel, "").Err() })
	})
	throughput := func(b *testing.B, publish func(p redis.Pipeliner)) {
		b.ResetTimer()
		for i := 0; i < b.N; i += 100 {
			_, err := owner.Pipelined(ctx, func(p redis.Pipeliner) error {
				for range min(100, b.N-i) {
					publish(p)
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("rate/PUBLISH", func(b *testing.B) {
		throughput(b, func(p redis.Pipeliner) { p.Publish(ctx, channel, "") })
	})
	b.Run("rate/SPUBLISH", func(b *testing.B) {
		throughput(b, func(p redis.Pipeliner) { p.SPublish(ctx, channel, "") })
	})
	b.Run("script/SPUBLISH-inside-EVAL", func(b *testing.B) {
		// Whether a release script could publish on its shard channel.
		script := redis.NewScript(`redis.call('SPUBLISH', ARGV[1], '') return 1`)
		for range b.N {
			if err := script.Run(ctx, cc, []string{"{bench-pubsub}"}, channel).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
