// Package embedded runs an in-process Kafka broker (kfake) for `dev` and for
// tests. It is a development tool: data lives in memory unless a data
// directory is given, and there is no replication.
package embedded

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Topic is a topic to create at start.
type Topic struct {
	Name       string
	Partitions int32 // 0 = the broker default (1 here)
	Compact    bool  // cleanup.policy=compact
}

// Options configure the broker.
type Options struct {
	// Addr is host:port to listen on; "" or port 0 picks a free port.
	Addr   string
	Topics []Topic
	Logger *slog.Logger
	// TLS serves the listener over TLS; with ClientAuth set, clients must
	// present certificates (mTLS).
	TLS *tls.Config
	// Users turns SASL on: only these users may connect.
	Users []User
	// DataDir keeps the broker's topics and records in a directory across
	// restarts ("" = in memory).
	DataDir string
	// Partitions is the partition count of topics created without one
	// (0 = 1).
	Partitions int32
	// MaxMessageBytes is the broker's message.max.bytes, the largest record
	// batch it takes (0 = kfake's default, Kafka's 1,048,588).
	MaxMessageBytes int64
	// Extra are further kfake options (tests use AllowAutoTopicCreation,
	// request interception is done through Cluster()).
	Extra []kfake.Opt
}

// User is a SASL user of the broker.
type User struct {
	Mechanism string // PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
	Name      string
	Password  string
}

// Broker is a running embedded broker.
type Broker struct {
	cluster *kfake.Cluster
}

// Start starts the broker and creates the topics.
func Start(opts Options) (*Broker, error) {
	host, port := "127.0.0.1", 0
	if opts.Addr != "" {
		h, p, err := net.SplitHostPort(opts.Addr)
		if err != nil {
			return nil, fmt.Errorf("embedded kafka address %q: %w", opts.Addr, err)
		}
		if h != "" {
			host = h
		}
		if port, err = strconv.Atoi(p); err != nil {
			return nil, fmt.Errorf("embedded kafka address %q: bad port: %w", opts.Addr, err)
		}
	}
	partitions := max(opts.Partitions, 1)
	kopts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.DefaultNumPartitions(int(partitions)),
		kfake.Ports(port),
		// kfake listens on 127.0.0.1; honour the host the user asked for.
		kfake.ListenFn(func(network, addr string) (net.Listener, error) {
			_, p, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			return net.Listen(network, net.JoinHostPort(host, p))
		}),
	}
	if opts.Logger != nil {
		kopts = append(kopts, kfake.WithLogger(slogAdapter{opts.Logger}))
	}
	if opts.TLS != nil {
		kopts = append(kopts, kfake.TLS(opts.TLS))
	}
	if len(opts.Users) > 0 {
		kopts = append(kopts, kfake.EnableSASL())
		for _, u := range opts.Users {
			kopts = append(kopts, kfake.Superuser(u.Mechanism, u.Name, u.Password))
		}
	}
	if opts.DataDir != "" {
		kopts = append(kopts, kfake.DataDir(opts.DataDir))
	}
	if opts.MaxMessageBytes > 0 {
		kopts = append(kopts, kfake.BrokerConfigs(map[string]string{"message.max.bytes": strconv.FormatInt(opts.MaxMessageBytes, 10)}))
	}
	kopts = append(kopts, opts.Extra...)
	c, err := kfake.NewCluster(kopts...)
	if err != nil {
		return nil, fmt.Errorf("starting embedded kafka on %s:%d: %w", host, port, err)
	}
	b := &Broker{cluster: c}
	if err := b.CreateTopics(opts.Topics...); err != nil {
		c.Close()
		return nil, err
	}
	return b, nil
}

// CreateTopics creates topics; a topic that exists already is left alone.
func (b *Broker) CreateTopics(topics ...Topic) error {
	for _, t := range topics {
		var configs map[string]string
		if t.Compact {
			configs = map[string]string{"cleanup.policy": "compact"}
		}
		err := b.cluster.CreateTopic(t.Name, t.Partitions, configs)
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("creating topic %q: %w", t.Name, err)
		}
	}
	return nil
}

// Addr is the bootstrap address.
func (b *Broker) Addr() string { return b.cluster.ListenAddrs()[0] }

// Cluster exposes kfake's controls (Compact, ControlKey, faults) to tests.
func (b *Broker) Cluster() *kfake.Cluster { return b.cluster }

// Close stops the broker.
func (b *Broker) Close() { b.cluster.Close() }

// Run starts the broker and keeps it until ctx ends.
func Run(ctx context.Context, opts Options, started func(*Broker)) error {
	b, err := Start(opts)
	if err != nil {
		return err
	}
	defer b.Close()
	if started != nil {
		started(b)
	}
	<-ctx.Done()
	return nil
}

type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Logf(level kfake.LogLevel, msg string, args ...any) {
	var l slog.Level
	switch level {
	case kfake.LogLevelError:
		l = slog.LevelError
	case kfake.LogLevelWarn:
		l = slog.LevelWarn
	case kfake.LogLevelInfo:
		l = slog.LevelInfo
	default:
		l = slog.LevelDebug
	}
	a.l.Log(context.Background(), l, fmt.Sprintf(msg, args...), "component", "embedded-kafka")
}
