package check

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dlockhq/dlock/natsdlock"
)

// natsVarz is the subject on which every nats-server answers with its
// settings (/varz of its monitoring port), to the system account and to
// accounts that import it from there.
const natsVarz = "$SYS.REQ.SERVER.PING.VARZ"

// natsVarzWait bounds the wait for an answer on natsVarz: an account
// denied the subject gets none (the server tells the connection's error
// handler alone).
const natsVarzWait = 2 * time.Second

// readNATS reads, through the driver's connection, the server it is
// connected to (its version and, where the account may ask for them, its
// JetStream settings), the replicas, storage and, on a cluster, leader of
// the bucket's stream, and the clock of the stream's leader.
func readNATS(ctx context.Context, d *natsdlock.Driver) ([]Server, error) {
	nc := d.Conn()
	s := Server{Addr: nc.ConnectedAddr(), Settings: map[string]string{"nats-server": nc.ConnectedServerVersion()}}
	if c := nc.ConnectedClusterName(); c != "" {
		s.Settings["cluster"] = c
	}
	st, err := d.KeyValue().Status(ctx)
	if err != nil {
		return nil, err
	}
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok {
		info := bs.StreamInfo()
		cfg := info.Config
		if info.Cluster != nil && s.Settings["cluster"] != "" {
			s.Settings["bucket_leader"] = info.Cluster.Leader
		}
		s.Settings["bucket"] = bs.Bucket()
		s.Settings["replicas"] = strconv.Itoa(cfg.Replicas)
		s.Settings["storage"] = map[jetstream.StorageType]string{jetstream.FileStorage: "file", jetstream.MemoryStorage: "memory"}[cfg.Storage]
	}
	switch sync, err := natsSync(ctx, nc); {
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		s.Unreadable = "sync_interval: the server shows it on its monitoring port (/varz) and to the system account; this account gets no answer on " + natsVarz
	case err != nil:
		return nil, fmt.Errorf("reading sync_interval: %w", err)
	default:
		s.Settings["sync_interval"] = sync
	}
	s.Clock, err = natsClock(ctx, nc, d.KeyValue().Bucket())
	return []Server{s}, err
}

// natsSync asks a server for its JetStream settings and returns how often
// it writes its streams to disk: "always", or the interval.
func natsSync(ctx context.Context, nc *nats.Conn) (string, error) {
	ask, cancel := context.WithTimeout(ctx, natsVarzWait)
	defer cancel()
	m, err := nc.RequestWithContext(ask, natsVarz, nil)
	if err != nil {
		return "", err
	}
	var r struct {
		Data struct {
			JetStream struct {
				Config *struct {
					SyncInterval time.Duration `json:"sync_interval"`
					SyncAlways   bool          `json:"sync_always"`
				} `json:"config"`
			} `json:"jetstream"`
		} `json:"data"`
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	switch err := json.Unmarshal(m.Data, &r); {
	case err != nil:
		return "", fmt.Errorf("%s: %w", natsVarz, err)
	case r.Error != nil:
		return "", fmt.Errorf("%s: %s", natsVarz, r.Error.Description)
	case r.Data.JetStream.Config == nil:
		return "", fmt.Errorf("%s: the answer has no JetStream settings", natsVarz)
	case r.Data.JetStream.Config.SyncAlways:
		return "always", nil
	}
	return r.Data.JetStream.Config.SyncInterval.String(), nil
}

// natsClock reads the clock of the leader of the bucket's stream, which
// answers a request for the stream's information with its time.
func natsClock(ctx context.Context, nc *nats.Conn, bucket string) (*Skew, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	stream, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, err
	}
	return measureSkew(ctx, time.Microsecond, func(ctx context.Context) (time.Time, error) {
		info, err := stream.Info(ctx)
		if err != nil {
			return time.Time{}, err
		}
		return info.TimeStamp, nil
	})
}
