package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
)

// Why a kafka binding cannot connect, as ConnectError causes.
var (
	// ErrAuthentication: the brokers refused the binding's SASL credentials.
	ErrAuthentication = errors.New("kafka authentication failed")
	// ErrTLS: the TLS handshake failed, most often because the broker's
	// certificate is not signed by a CA the binding trusts, or because the
	// broker refused the client certificate.
	ErrTLS = errors.New("kafka TLS handshake failed")
	// ErrNoBroker: no broker answered, for no reason librdkafka named.
	ErrNoBroker = errors.New("no kafka broker answers")
)

// ConnectError says why a kafka binding's cluster did not answer: Cause is
// one of ErrAuthentication, ErrTLS or ErrNoBroker, Detail is librdkafka's
// own words.
type ConnectError struct {
	Binding string
	Cause   error
	Detail  string
}

func (e *ConnectError) Error() string {
	return fmt.Sprintf("kafka binding %q: %v: %s", e.Binding, e.Cause, e.Detail)
}

func (e *ConnectError) Unwrap() error { return e.Cause }

// connectCause names the cause of a librdkafka error event when it is about
// connecting securely, else nil. Brokers that drop the connection on bad
// credentials (rather than answering) surface as a transport error whose
// text says SASL authentication failed.
func connectCause(e kafka.Error) error {
	msg := e.String()
	switch {
	case e.Code() == kafka.ErrAuthentication, strings.Contains(msg, "SASL authentication error"):
		return ErrAuthentication
	case e.Code() == kafka.ErrSsl, strings.Contains(msg, "SSL handshake failed"), strings.Contains(msg, "certificate verify failed"):
		return ErrTLS
	}
	return nil
}

// CheckOptions configure CheckConnection.
type CheckOptions struct {
	Name         string            // the kafka binding's name
	Properties   map[string]string // librdkafka properties of the binding
	KafkaTimeout time.Duration     // bound of one attempt (default 5s)
	// Interval is the time between attempts (default 2s); it bounds an
	// attempt too, so that a shutdown waits at most that long for it.
	Interval time.Duration
	// Report is told the outcome of every attempt: nil once the cluster
	// answered, else a *ConnectError.
	Report func(error)
}

// CheckConnection connects a short-lived client with a binding's properties
// and asks the cluster for its metadata, again every Interval until it
// answers or ctx ends. The long-lived clients only say that no broker
// answers; this one listens to librdkafka's error events to say why
// (credentials refused, certificate not trusted). It returns nil once the
// cluster answered, else ctx's error.
func CheckConnection(ctx context.Context, opts CheckOptions) error {
	if opts.KafkaTimeout <= 0 {
		opts.KafkaTimeout = 5 * time.Second
	}
	if opts.Interval <= 0 {
		opts.Interval = 2 * time.Second
	}
	if opts.Report == nil {
		opts.Report = func(error) {}
	}
	cm := client.CheckConfig(opts.Properties, opts.KafkaTimeout)
	p, err := kafka.NewProducer(cm)
	if err != nil {
		return fmt.Errorf("creating the connection check of kafka binding %q: %w", opts.Name, err)
	}
	defer p.Close()

	var mu sync.Mutex
	var cause *ConnectError // the latest named cause since the last attempt
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		client.ForwardLogs(slog.New(slog.DiscardHandler), p.Logs(), "check", stop)
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case ev := <-p.Events():
				if e, ok := ev.(kafka.Error); ok {
					if c := connectCause(e); c != nil {
						mu.Lock()
						cause = &ConnectError{Binding: opts.Name, Cause: c, Detail: e.String()}
						mu.Unlock()
					}
				}
			}
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
	}()

	attempt := min(opts.KafkaTimeout, opts.Interval)
	for {
		_, err := p.GetMetadata(nil, false, int(attempt/time.Millisecond))
		if err == nil {
			opts.Report(nil)
			return nil
		}
		mu.Lock()
		ce := cause
		cause = nil
		mu.Unlock()
		if ce == nil {
			ce = &ConnectError{Binding: opts.Name, Cause: ErrNoBroker, Detail: err.Error()}
		}
		opts.Report(ce)
		t := time.NewTimer(opts.Interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
