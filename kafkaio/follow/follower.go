package follow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
)

// Options configure a Follower.
type Options struct {
	Name         string            // the kafka binding's name, for errors
	Properties   map[string]string // librdkafka properties of the binding
	KafkaTimeout time.Duration     // bound of each metadata look-up (default 5s)
	// GroupPrefix starts the consumer's group id; a UUID completes it, so
	// every replica has a group of its own (never joined, nothing committed).
	GroupPrefix string
	// What names the consumer in errors and in its debug lines ("reply
	// consumer"); Role names it in librdkafka's log lines and statistics
	// ("replies"); TopicRole names what a followed topic is to the reader
	// ("reply topic").
	What, Role, TopicRole string
	// AddedLog is the line logged when partitions added to a topic are
	// assigned.
	AddedLog string
	Logger   *slog.Logger    // naming the binding (client.Logger)
	Stats    *client.RdStats // receives the consumer's statistics (optional)
	// PartitionCheck is how often the partition counts of the followed
	// topics are read (default 30s).
	PartitionCheck time.Duration
	// Describer, if set, describes the topics for the partition check in
	// place of the consumer's own admin handle: a reader that looks up
	// offsets on a client of its own has that client learn of added
	// partitions before it asks for their offsets.
	Describer *kafka.AdminClient
	// Apply is given every record read, on the follower's one polling
	// goroutine, before its partition's position moves past it: whoever
	// waits for a position or for the catch-up finds the record applied.
	Apply func(m *kafka.Message)
	// Sweep, if set, is called on the polling goroutine every SweepEvery
	// (how the readers drop what has grown old).
	Sweep      func(now time.Time)
	SweepEvery time.Duration
	Now        func() time.Time // the sweep's clock; nil = time.Now
	// CaughtUp, if set, is called once per topic when every partition read
	// what it held when the topic was assigned (see Assign).
	CaughtUp func(topic string)
	// Gone, if set, is told of a followed topic that was deleted (the
	// error wraps ErrTopicDeleted) or created again (ErrTopicRecreated),
	// after the follower stopped reading it (see lifecycle.go): the owner
	// drops what it read of it and assigns it again to read on.
	Gone func(topic string, why error)
}

// Follower is one assign-only consumer (no group membership, no commits)
// reading a set of topics, each from offsets its reader chose (a point in
// time, mostly). It keeps per partition the offset read next, tells when a
// topic has read what it held when it was assigned (its catch-up), and
// assigns partitions added to a followed topic, which an assign-only
// consumer is never told of, every PartitionCheck.
//
// The reply index and the written-id index are followers with a store of
// their own: the follower hands them the records, they keep what they need.
type Follower struct {
	opts   Options
	logger *slog.Logger
	cons   *kafka.Consumer
	admin  *kafka.AdminClient // derived from cons: describes the topics

	// assignMu serialises assignment changes: confluent-kafka-go's
	// IncrementalAssign writes consumer state without a lock.
	assignMu sync.Mutex
	mu       sync.Mutex
	topics   map[string]*followed

	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	stopLogs chan struct{}
	logsDone chan struct{}
}

// followed is the reading state of one assigned topic, guarded by
// Follower.mu. Every slice has one element per assigned partition, added
// partitions included.
type followed struct {
	next      []int64 // offset read next
	end       []int64 // end offsets when the topic was assigned
	done      []bool  // partition reached its end offset
	remaining int     // partitions not done
	caught    bool
	// changed is closed when a position moves; nil until someone waits.
	changed chan struct{}
	// id is the topic's id when it was assigned (zero: unknown).
	id [16]byte
}

// New creates the follower's consumer and starts reading (no topic yet:
// they come with Assign).
func New(opts Options) (*Follower, error) {
	if opts.KafkaTimeout <= 0 {
		opts.KafkaTimeout = client.DefaultKafkaTimeout
	}
	if opts.PartitionCheck <= 0 {
		opts.PartitionCheck = DefaultPartitionCheck
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = client.Logger(nil, opts.Name)
	}
	cons, admin, err := client.NewConsumer(opts.Name, opts.Properties, opts.KafkaTimeout, opts.GroupPrefix+uuid.NewString(), opts.What)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &Follower{
		opts: opts, logger: opts.Logger, cons: cons, admin: admin,
		topics: map[string]*followed{},
		ctx:    ctx, cancel: cancel,
		stopLogs: make(chan struct{}), logsDone: make(chan struct{}),
	}
	go func() {
		defer close(f.logsDone)
		client.ForwardLogs(f.logger, cons.Logs(), opts.Role, f.stopLogs)
	}()
	f.wg.Add(2)
	go f.poll()
	go func() {
		defer f.wg.Done()
		CheckEvery(f.ctx, opts.PartitionCheck, f.logger, "the "+opts.TopicRole+"s", f.CheckPartitions)
	}()
	return f, nil
}

// Close stops reading and closes the consumer.
func (f *Follower) Close() {
	f.cancel()
	f.wg.Wait()
	f.admin.Close()
	_ = f.cons.Close()
	close(f.stopLogs)
	<-f.logsDone
}

// Lookups answers metadata and offset look-ups on the consumer's own
// connections; they are safe beside its reading.
type Lookups interface {
	MetadataClient
	QueryWatermarkOffsets(topic string, partition int32, timeoutMs int) (low, high int64, err error)
	OffsetsForTimes(times []kafka.TopicPartition, timeoutMs int) ([]kafka.TopicPartition, error)
}

// Lookups returns the consumer as a look-up client.
func (f *Follower) Lookups() Lookups { return f.cons }

// Assign starts reading the partitions of topic, partition p from start[p];
// the topic has caught up once every partition has read up to end[p] (or
// to the partition's end, whichever comes first). A failed assignment
// leaves the topic unread, to be assigned again.
func (f *Follower) Assign(topic string, start, end []int64) error {
	n := len(start)
	assign := make([]kafka.TopicPartition, n)
	t := &followed{next: make([]int64, n), end: end, done: make([]bool, n), id: f.topicID(topic)}
	for p := range assign {
		assign[p] = kafka.TopicPartition{Topic: &topic, Partition: int32(p), Offset: kafka.Offset(start[p])}
		t.next[p] = start[p]
		if start[p] >= end[p] {
			t.done[p] = true
		} else {
			t.remaining++
		}
	}
	// assignMu is held from the state to the assignment: grow sees a
	// followed topic only once its partitions are assigned.
	f.assignMu.Lock()
	f.mu.Lock()
	f.topics[topic] = t // before the assignment: its first records count
	f.mu.Unlock()
	err := f.cons.IncrementalAssign(assign)
	if err != nil {
		f.mu.Lock()
		delete(f.topics, topic)
		f.mu.Unlock()
		f.assignMu.Unlock()
		return fmt.Errorf("assigning %s %s: %w", f.opts.TopicRole, topic, err)
	}
	f.assignMu.Unlock()
	f.mu.Lock()
	caught := f.checkCaughtUpLocked(t) // nothing to read in any partition
	f.mu.Unlock()
	if caught {
		f.caughtUp(topic)
	}
	return nil
}

// Partitions is the number of partitions of topic being read (0 for a
// topic not assigned).
func (f *Follower) Partitions(topic string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t := f.topics[topic]; t != nil {
		return len(t.next)
	}
	return 0
}

// BehindError is a wait for positions that ended first: partition
// Partition was read up to At, not to End.
type BehindError struct {
	Partition int
	At, End   int64
	Err       error // why the wait ended (the context's error)
}

func (e *BehindError) Error() string {
	return fmt.Sprintf("partition %d read to offset %d of %d: %v", e.Partition, e.At, e.End, e.Err)
}

func (e *BehindError) Unwrap() error { return e.Err }

// WaitReached returns once every partition p of topic has been read up to
// end[p], or with a *BehindError when ctx ends first.
func (f *Follower) WaitReached(ctx context.Context, topic string, end []int64) error {
	for {
		f.mu.Lock()
		t := f.topics[topic]
		if t == nil {
			f.mu.Unlock()
			return fmt.Errorf("%s %s is not being read", f.opts.TopicRole, topic)
		}
		behind := -1
		for p, e := range end {
			if p < len(t.next) && t.next[p] < e {
				behind = p
				break
			}
		}
		if behind < 0 {
			f.mu.Unlock()
			return nil
		}
		if t.changed == nil {
			t.changed = make(chan struct{})
		}
		changed, at := t.changed, t.next[behind]
		f.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return &BehindError{Partition: behind, At: at, End: end[behind], Err: ctx.Err()}
		}
	}
}

// CheckPartitions describes every followed topic in one request and
// assigns the partitions each gained. The follower runs it every
// PartitionCheck; a caller that knows partitions were added may run it at
// once.
func (f *Follower) CheckPartitions() error {
	f.mu.Lock()
	names := make([]string, 0, len(f.topics))
	for name := range f.topics {
		names = append(names, name)
	}
	f.mu.Unlock()
	states, err := Describe(f.ctx, f.describer(), names, f.opts.KafkaTimeout)
	errs := []error{err}
	for name, st := range states {
		if st.Unknown {
			f.drop(name, nil, fmt.Errorf("%w: %s %s", ErrTopicDeleted, f.opts.TopicRole, name))
			continue
		}
		if f.idChanged(name, st.ID) {
			f.drop(name, nil, fmt.Errorf("%w: %s %s has another topic id", ErrTopicRecreated, f.opts.TopicRole, name))
			continue
		}
		errs = append(errs, f.grow(name, st.Partitions))
	}
	return errors.Join(errs...)
}

func (f *Follower) describer() *kafka.AdminClient {
	if f.opts.Describer != nil {
		return f.opts.Describer
	}
	return f.admin
}

// grow assigns the partitions of a followed topic from the number assigned
// up to n, at their beginning (see AssignAdded). A smaller n is ignored
// (Kafka never removes partitions; it is a stale answer).
func (f *Follower) grow(topic string, n int) error {
	f.assignMu.Lock()
	defer f.assignMu.Unlock()
	f.mu.Lock()
	t := f.topics[topic]
	if t == nil || n <= len(t.next) {
		f.mu.Unlock()
		return nil
	}
	old := len(t.next)
	// The catch-up covers what was there when the topic was assigned: the
	// new partitions count as done, so a caught-up topic stays caught up.
	for range n - old {
		t.next = append(t.next, 0)
		t.end = append(t.end, 0)
		t.done = append(t.done, true)
	}
	f.mu.Unlock()
	if err := AssignAdded(f.cons, topic, f.opts.TopicRole, old, n); err != nil {
		f.mu.Lock()
		t.next, t.end, t.done = t.next[:old], t.end[:old], t.done[:old]
		f.mu.Unlock()
		return err
	}
	f.logger.Info(f.opts.AddedLog, "topic", topic, "partitions_before", old, "partitions", n)
	return nil
}

// poll is the one goroutine that polls the consumer.
func (f *Follower) poll() {
	defer f.wg.Done()
	var nextSweep time.Time
	if f.opts.Sweep != nil {
		nextSweep = f.opts.Now().Add(f.opts.SweepEvery)
	}
	for f.ctx.Err() == nil {
		switch ev := f.cons.Poll(100).(type) {
		case *kafka.Message:
			if ev.TopicPartition.Error != nil || ev.TopicPartition.Topic == nil {
				break
			}
			if !f.admit(*ev.TopicPartition.Topic, ev.TopicPartition.Partition, int64(ev.TopicPartition.Offset)) {
				break
			}
			f.opts.Apply(ev)
			f.progress(*ev.TopicPartition.Topic, ev.TopicPartition.Partition, int64(ev.TopicPartition.Offset)+1, false)
		case kafka.PartitionEOF:
			if ev.Topic != nil && f.admit(*ev.Topic, ev.Partition, int64(ev.Offset)) {
				// The end of a partition now is at or beyond its end when
				// the topic was assigned (trailing control records included).
				f.progress(*ev.Topic, ev.Partition, int64(ev.Offset), true)
			}
		case kafka.Error:
			f.logger.Debug(f.opts.What, "err", ev)
		case *kafka.Stats:
			f.opts.Stats.Record(f.opts.Role, ev.String())
		}
		if f.opts.Sweep != nil {
			if now := f.opts.Now(); !now.Before(nextSweep) {
				f.opts.Sweep(now)
				nextSweep = now.Add(f.opts.SweepEvery)
			}
		}
	}
}

// progress records that partition p of topic is read up to next (at its
// end when eof), wakes whoever waits for positions, and reports the
// catch-up.
func (f *Follower) progress(topic string, p int32, next int64, eof bool) {
	f.mu.Lock()
	t := f.topics[topic]
	if t == nil || int(p) >= len(t.next) {
		f.mu.Unlock()
		return
	}
	if next > t.next[p] {
		t.next[p] = next
		if t.changed != nil {
			close(t.changed)
			t.changed = nil
		}
	}
	caught := false
	if !t.done[p] && (eof || next >= t.end[p]) {
		t.done[p] = true
		t.remaining--
		caught = f.checkCaughtUpLocked(t)
	}
	f.mu.Unlock()
	if caught {
		f.caughtUp(topic)
	}
}

// checkCaughtUpLocked marks the topic caught up once no partition remains;
// true the first time, when the caller must call caughtUp.
func (f *Follower) checkCaughtUpLocked(t *followed) bool {
	if t.caught || t.remaining > 0 {
		return false
	}
	t.caught = true
	return true
}

func (f *Follower) caughtUp(topic string) {
	if f.opts.CaughtUp != nil {
		f.opts.CaughtUp(topic)
	}
}
