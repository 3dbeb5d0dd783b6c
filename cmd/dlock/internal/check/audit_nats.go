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

// Subjects on which every nats-server answers requests about itself
// (those of its monitoring port), to the system account and to accounts
// that import them from there: nats-server imports natsConnz (it answers
// with the account's connections) into every account, natsVarz (its
// settings) into none.
const (
	natsConnz = "$SYS.REQ.SERVER.PING.CONNZ"
	natsVarz  = "$SYS.REQ.SERVER.PING.VARZ"
)

// natsAskWait bounds the wait for the answer to a request about a server:
// an account denied the subject gets none (the server tells the
// connection's error handler alone).
const natsAskWait = 2 * time.Second

// readNATS reads, through the driver's connection, the bucket's stream
// (replicas and storage) and each server that keeps it (the one the
// driver is connected to, or on a cluster the stream's leader and
// replicas, by name): its version and, where the account may ask for them,
// its JetStream settings; and the clock of the stream's leader.
func readNATS(ctx context.Context, d *natsdlock.Driver) ([]Server, error) {
	nc := d.Conn()
	st, err := d.KeyValue().Status(ctx)
	if err != nil {
		return nil, err
	}
	info := st.(*jetstream.KeyValueBucketStatus).StreamInfo()
	out := []Server{{Addr: nc.ConnectedAddr(), Settings: map[string]string{
		"bucket":   st.Bucket(),
		"replicas": strconv.Itoa(info.Config.Replicas),
		"storage":  map[jetstream.StorageType]string{jetstream.FileStorage: "file", jetstream.MemoryStorage: "memory"}[info.Config.Storage],
	}}}
	names := []string{""} // the server the driver is connected to
	if c := nc.ConnectedClusterName(); c != "" && info.Cluster != nil {
		out[0].Addr, out[0].Settings["cluster"], names[0] = info.Cluster.Leader, c, info.Cluster.Leader
		for _, r := range info.Cluster.Replicas {
			out, names = append(out, Server{Addr: r.Name, Settings: map[string]string{}}), append(names, r.Name)
		}
	}
	for i, name := range names {
		s := &out[i]
		switch v, err := natsAsk(ctx, nc, natsConnz, name, &struct{}{}); {
		case unanswered(ctx, err) && name == "":
			s.Settings["nats-server"] = nc.ConnectedServerVersion()
		case unanswered(ctx, err):
			s.Unreadable = "the version: this account gets no answer on " + natsConnz + "; "
		case err != nil:
			return nil, fmt.Errorf("asking %s for its version: %w", s.Addr, err)
		default:
			s.Settings["nats-server"] = v
		}
		var varz struct {
			JetStream struct {
				Config *struct {
					SyncInterval time.Duration `json:"sync_interval"`
					SyncAlways   bool          `json:"sync_always"`
				} `json:"config"`
			} `json:"jetstream"`
		}
		switch _, err := natsAsk(ctx, nc, natsVarz, name, &varz); {
		case unanswered(ctx, err):
			s.Unreadable += "sync_interval: the server shows it on its monitoring port (/varz) and to the system account; this account gets no answer on " + natsVarz
		case err != nil:
			return nil, fmt.Errorf("asking %s for its sync_interval: %w", s.Addr, err)
		case varz.JetStream.Config == nil:
			return nil, fmt.Errorf("%s: the answer on %s has no JetStream settings", s.Addr, natsVarz)
		case varz.JetStream.Config.SyncAlways:
			s.Settings["sync_interval"] = "always"
		default:
			s.Settings["sync_interval"] = varz.JetStream.Config.SyncInterval.String()
		}
	}
	out[0].Clock, err = natsClock(ctx, nc, st.Bucket())
	return out, err
}

// unanswered reports a request about a server that got no answer: no
// server answers for this account, or it may not ask.
func unanswered(ctx context.Context, err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
}

// natsAsk asks the server named (any server if name is empty) on subject,
// decodes the data of its answer into data and returns the server's
// version.
func natsAsk(ctx context.Context, nc *nats.Conn, subject, name string, data any) (version string, err error) {
	filter, _ := json.Marshal(map[string]string{"server_name": name})
	ask, cancel := context.WithTimeout(ctx, natsAskWait)
	defer cancel()
	m, err := nc.RequestWithContext(ask, subject, filter)
	if err != nil {
		return "", err
	}
	var r struct {
		Server struct {
			Name    string `json:"name"`
			Version string `json:"ver"`
		} `json:"server"`
		Data  json.RawMessage `json:"data"`
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	switch err := json.Unmarshal(m.Data, &r); {
	case err != nil:
		return "", fmt.Errorf("%s: %w", subject, err)
	case r.Error != nil:
		return "", fmt.Errorf("%s: %s", subject, r.Error.Description)
	case name != "" && r.Server.Name != name: // the filter matches names that contain it
		return "", fmt.Errorf("%s: asked %s, %s answered", subject, name, r.Server.Name)
	}
	return r.Server.Version, json.Unmarshal(r.Data, data)
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
