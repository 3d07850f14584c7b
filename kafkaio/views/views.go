package views

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/follow"
)

// Options configure Views.
type Options struct {
	Name         string            // the kafka binding's name, for logs
	Properties   map[string]string // librdkafka properties of the binding
	KafkaTimeout time.Duration     // bound of metadata look-ups and of answers that need Kafka
	Logger       *slog.Logger
	// Readiness receives one condition per warmed view (optional).
	Readiness client.Readiness
	// CoalesceWindow bounds how long View.Changed waits to gather writes
	// before waking its waiters (default 2ms).
	CoalesceWindow time.Duration
	// Views opened on demand (templated topics; not warmed) are evicted after
	// ViewIdle without a holder, and capped in number (MaxViews) and in the
	// bytes of all views (MaxViewBytes); 0 = no limit.
	ViewIdle     time.Duration
	MaxViews     int
	MaxViewBytes int64
	// Stats receives the statistics of the live consumer ("views") and of
	// the log-tail consumer (optional).
	Stats *client.RdStats
	// PartitionCheck is how often the partition counts of the views' topics
	// are read, so that partitions added to a topic are followed; default
	// 30s.
	PartitionCheck time.Duration
	// Converters gives a topic's record converter (its models), or nil
	// (optional).
	Converters func(topic string) Converter
	// DiskStore tells whether a topic's view is kept on disk, in a
	// directory of its own under StoreDir, rather than in memory
	// (optional: nil keeps every view in memory).
	DiskStore func(topic string) bool
	StoreDir  string
	// StoreFS replaces the operating system's file system under the disk
	// stores (nil: the operating system's). Tests give a disk that fills
	// up or cannot be read.
	StoreFS vfs.FS
	// BulkLoadRecords is the smallest first load (records to read into an
	// empty store) written in bulk: no compaction until it ends, then one;
	// one view of the cluster at a time.
	// 0: 50,000 (below it the bulk costs more than it saves); negative:
	// none. Tests lower it to take every first load that way.
	BulkLoadRecords int64
}

// Views manages the views of one Kafka cluster: its shared live consumer,
// its admin handle, and the views read from it. Nothing in it is per
// request.
type Views struct {
	opts    Options
	logger  *slog.Logger
	groupID string

	live  *kafka.Consumer
	admin *kafka.AdminClient

	// assignMu serialises changes to the live consumer's assignment:
	// confluent-kafka-go's IncrementalAssign writes consumer state without a
	// lock, and views catch up and are evicted concurrently.
	assignMu sync.Mutex
	// mu guards views. Finding a view is on every fetch's path and on every
	// record the live consumer applies: those take the read lock.
	mu    sync.RWMutex
	views map[string]*viewSlot
	// handles are the topics' Handles, one per topic asked for (a
	// static fetch route's topic), kept while the client lives: eviction
	// clears a handle's view, so an evicted view is not kept alive by it.
	handles map[string]*Handle
	// handOvers carries caught-up views' partitions to handOverLoop.
	handOvers chan handOverReq
	// recheck asks followTopics for a topic check now (triggerCheck).
	recheck chan struct{}
	// serials numbers the views opened, so that a view opened again for a
	// recreated topic is told from its predecessor (View.Serial).
	serials atomic.Uint64
	// deleted are the topics whose views were dropped for their deletion,
	// so that opening them again says why they are missing. Guarded by mu.
	deleted map[string]bool

	// stores are what the views kept on disk share (a block cache).
	stores        storeOptions
	storeFailures atomic.Uint64
	readFailures  atomic.Uint64 // look-ups and scans of disk views that could not read

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type viewSlot struct {
	done   chan struct{} // closed when view or err is set
	view   *View
	err    error
	pinned bool // warmed (a static topic): never evicted
}

// ErrTooManyViews means the view limits (count or bytes) are reached and no
// idle view can be evicted to make room.
var ErrTooManyViews = errors.New("too many views: the view limits are reached")

// New connects the shared consumer of a cluster. It does not wait for
// the brokers: readiness is per view.
func New(opts Options) (*Views, error) {
	if opts.KafkaTimeout <= 0 {
		opts.KafkaTimeout = client.DefaultKafkaTimeout
	}
	if opts.CoalesceWindow <= 0 {
		opts.CoalesceWindow = 2 * time.Millisecond
	}
	if opts.PartitionCheck <= 0 {
		opts.PartitionCheck = follow.DefaultPartitionCheck
	}
	logger := client.Logger(opts.Logger, opts.Name)
	groupID := "kafka-ext-proc-" + uuid.NewString()
	live, admin, err := client.NewConsumer(opts.Name, client.LiveProperties(opts.Properties), opts.KafkaTimeout, groupID, "live consumer")
	if err != nil {
		return nil, err
	}
	var stores storeOptions
	if opts.DiskStore != nil {
		if err := ensureDir(opts.StoreDir); err != nil {
			live.Close()
			admin.Close()
			return nil, err
		}
		stores = storeOptions{cache: pebble.NewCache(storeCacheBytes), entries: newEntryCache(), fs: opts.StoreFS, logger: logger,
			bulkMin: cmp.Or(opts.BulkLoadRecords, bulkMinRecords), bulkSlot: make(chan struct{}, 1)}
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Views{
		opts: opts, logger: logger, groupID: groupID,
		live: live, admin: admin,
		views:     map[string]*viewSlot{},
		handles:   map[string]*Handle{},
		handOvers: make(chan handOverReq),
		recheck:   make(chan struct{}, 1),
		deleted:   map[string]bool{},
		stores:    stores,
		ctx:       ctx, cancel: cancel,
	}
	if c.stores.cache != nil {
		c.stores.readFailures = &c.readFailures
	}
	c.wg.Add(6)
	go func() { defer c.wg.Done(); client.ForwardLogs(logger, live.Logs(), "live", ctx.Done()) }()
	go c.pollLive()
	go c.watchBrokers()
	go c.evictIdle()
	go c.followTopics()
	go c.handOverLoop()
	return c, nil
}

// brokerCheckInterval is how often a client asks the cluster for metadata to
// report whether a broker answers (one small request per cluster, not per
// request).
const brokerCheckInterval = 2 * time.Second

// watchBrokers reports to the readiness whether the cluster answers.
func (c *Views) watchBrokers() {
	defer c.wg.Done()
	if c.opts.Readiness == nil {
		return
	}
	name := "kafka " + c.opts.Name + " brokers"
	t := time.NewTicker(brokerCheckInterval)
	defer t.Stop()
	for {
		timeout := min(c.opts.KafkaTimeout, brokerCheckInterval)
		if _, err := c.admin.GetMetadata(c.brokerProbe(), false, int(timeout/time.Millisecond)); err != nil {
			c.opts.Readiness.Set(name, false, "no broker answers: "+err.Error())
		} else {
			c.opts.Readiness.Set(name, true, "")
		}
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// brokerProbe is the topic the broker check asks the metadata of: one the
// views read, or nil when there is none. Asking for no topic in particular
// asks for every topic the client knows, one entry per view: with 1,000
// views that was most of what a quiet processor's librdkafka threads did.
// Any answer tells that a broker answers, which is all the check wants.
func (c *Views) brokerProbe() *string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for topic, s := range c.views {
		if s.view != nil {
			return &topic
		}
	}
	return nil
}

// Close stops the consumers. Views stop changing; waiters are not woken.
func (c *Views) Close() {
	c.cancel()
	c.wg.Wait()
	c.admin.Close()
	_ = c.live.Close()
	c.mu.Lock()
	for _, s := range c.views {
		if s.view != nil {
			s.view.closeStore()
		}
	}
	if c.stores.cache != nil {
		c.stores.cache.Unref()
		c.stores.cache = nil // Close again lets go of nothing
	}
	c.mu.Unlock()
}

// ViewStats sums the sizes of a client's views.
type ViewStats struct {
	Views    int
	Ready    int
	Keys     int
	Bytes    int64
	NullKeys uint64
	// DiskBytes and CompactionBytes sum the views kept on disk (see
	// Stats); StoreFailures counts the writes their stores refused (a
	// full disk), each taking its view out of service.
	DiskBytes, CompactionBytes int64
	StoreFailures              uint64
	// ReadFailures counts the look-ups and scans of views on disk that
	// could not read (each answered as unavailable, the view kept).
	ReadFailures uint64
}

// Stats reports the sizes of every view.
func (c *Views) Stats() ViewStats {
	c.mu.RLock()
	views := make([]*View, 0, len(c.views))
	for _, s := range c.views {
		if s.view != nil {
			views = append(views, s.view)
		}
	}
	c.mu.RUnlock()
	var st ViewStats
	for _, v := range views {
		st.Views++
		select {
		case <-v.Ready():
			st.Ready++
		default:
		}
		vs := v.Stats()
		st.Keys += vs.Keys
		st.Bytes += vs.Bytes
		st.NullKeys += vs.NullKeys
		st.DiskBytes += vs.DiskBytes
		st.CompactionBytes += vs.CompactionBytes
	}
	st.StoreFailures = c.storeFailures.Load()
	st.ReadFailures = c.readFailures.Load()
	return st
}

// makeRoomLocked evicts idle on-demand views until a new view fits the
// limits, or fails with ErrTooManyViews.
func (c *Views) makeRoomLocked() error {
	for {
		n, bytes := 0, int64(0)
		for _, s := range c.views {
			n++
			if s.view != nil {
				bytes += s.view.Stats().Bytes
			}
		}
		over := (c.opts.MaxViews > 0 && n >= c.opts.MaxViews) || (c.opts.MaxViewBytes > 0 && bytes >= c.opts.MaxViewBytes)
		if !over {
			return nil
		}
		victim := c.lruIdleLocked(0)
		if victim == "" {
			return ErrTooManyViews
		}
		c.evictLocked(victim) // or held meanwhile: the next pass skips it
	}
}

// lruIdleLocked returns the least recently used on-demand view without a
// holder that has been idle at least minIdle ("" if none).
func (c *Views) lruIdleLocked(minIdle time.Duration) string {
	var victim string
	var oldest time.Time
	now := time.Now()
	for topic, s := range c.views {
		if s.pinned || s.view == nil {
			continue
		}
		last, held := s.view.idleSince()
		if held || now.Sub(last) < minIdle {
			continue
		}
		select {
		case <-s.view.Ready():
		default:
			continue // still catching up: its opener owns it
		}
		if victim == "" || last.Before(oldest) {
			victim, oldest = topic, last
		}
	}
	return victim
}

// evictLocked drops a view and stops reading its partitions, unless a
// holder took it since it was chosen (a Handle holds without the
// client's lock); it reports whether it did.
func (c *Views) evictLocked(topic string) bool {
	s := c.views[topic]
	if !s.view.retire() {
		return false
	}
	delete(c.views, topic)
	if h := c.handles[topic]; h != nil {
		h.view.CompareAndSwap(s.view, nil)
	}
	c.unassign(topic, s.view.Partitions())
	s.view.closeStore()
	c.logger.Debug("view evicted", "topic", topic)
	return true
}

// grow has the view of topic read n partitions, assigning the added ones to
// the live consumer from their start: an added partition holds only records
// written after it was created, so none is missed. The client's read lock
// is held throughout, so the view cannot be evicted (which unassigns its
// partitions) between growing and assigning.
func (c *Views) grow(topic string, n int) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	s, ok := c.views[topic]
	if !ok || s.view == nil || !s.view.isReady() {
		return
	}
	before := s.view.Partitions()
	added := s.view.grow(n)
	if len(added) == 0 {
		return
	}
	parts := make([]kafka.TopicPartition, len(added))
	for i, p := range added {
		parts[i] = kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.OffsetBeginning}
	}
	c.assignMu.Lock()
	err := c.live.IncrementalAssign(parts)
	c.assignMu.Unlock()
	if err != nil {
		// Nothing reads them: forget them, so the next check tries again.
		s.view.shrink(before)
		c.logger.Warn("assigning the partitions added to a topic; retrying at the next check", "topic", topic, "err", err)
		return
	}
	c.logger.Info("following the partitions added to a topic", "topic", topic, "partitions_before", before, "partitions", n)
}

// evictIdle runs while the client lives, evicting on-demand views idle for
// longer than ViewIdle.
func (c *Views) evictIdle() {
	defer c.wg.Done()
	if c.opts.ViewIdle <= 0 {
		return
	}
	t := time.NewTicker(min(c.opts.ViewIdle/2, time.Minute))
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		for victim := c.lruIdleLocked(c.opts.ViewIdle); victim != ""; victim = c.lruIdleLocked(c.opts.ViewIdle) {
			c.evictLocked(victim)
		}
		c.mu.Unlock()
	}
}

// Warm starts the views of topics without waiting for them, reporting each
// one to the readiness until it has caught up. A topic that does not exist
// is looked up again every second, so creating it later makes the process
// ready.
func (c *Views) Warm(topics ...string) {
	for _, topic := range topics {
		name := c.viewCondition(topic)
		if c.opts.Readiness != nil {
			c.opts.Readiness.Set(name, false, "catching up")
		}
		c.keepOpening(topic, name)
	}
}

// viewCondition is the readiness condition of a warmed view.
func (c *Views) viewCondition(topic string) string {
	return "kafka " + c.opts.Name + " view " + topic
}

// keepOpening opens the pinned view of topic in the background, looking a
// missing topic up again every second, until the view has caught up. It
// reports to the readiness under name, unless name is "": a warmed view
// dropped for its topic's deletion is opened again without taking the
// process out of service, as its routes answer for themselves (a missing
// topic, with the reason) and the other routes are served meanwhile.
func (c *Views) keepOpening(topic, name string) {
	report := func(ready bool, reason string) {
		if c.opts.Readiness != nil && name != "" {
			c.opts.Readiness.Set(name, ready, reason)
		}
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for c.ctx.Err() == nil {
			ctx, cancel := context.WithTimeout(c.ctx, c.opts.KafkaTimeout)
			_, err := c.view(ctx, topic, true)
			cancel()
			if err == nil {
				report(true, "")
				return
			}
			report(false, err.Error())
			if errors.Is(err, client.ErrUnknownTopic) {
				if name != "" {
					c.logger.Warn("a configured topic does not exist", "topic", topic)
				}
				select {
				case <-c.ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}
	}()
}

// View returns the view of topic, creating it on first use, once it has
// caught up. It fails with ErrUnknownTopic, or ErrNotReady when ctx ends
// first (the view keeps catching up for the next caller).
func (c *Views) View(ctx context.Context, topic string) (*View, error) {
	return c.view(ctx, topic, false)
}

// HoldView is View for a caller that reads the view for a while (a fetch, a
// long poll): the view is not evicted until the caller calls its Release. It
// waits at most wait (and no longer than ctx) for a view that is not caught up.
func (c *Views) HoldView(ctx context.Context, topic string, wait time.Duration) (*View, error) {
	if v := c.holdReady(topic); v != nil {
		return v, nil // the common case: no timer, no context
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		// Not open or not caught up yet: wait for it, then take it as above
		// (it may have been evicted meanwhile; then it opens again).
		if _, err := c.view(ctx, topic, false); err != nil {
			return nil, err
		}
		if v := c.holdReady(topic); v != nil {
			return v, nil
		}
	}
}

// holdReady holds the view of topic if it is open and caught up.
func (c *Views) holdReady(topic string) *View {
	c.mu.RLock()
	defer c.mu.RUnlock()
	s, ok := c.views[topic]
	if !ok || s.view == nil || !s.view.isReady() || !s.view.tryHold() {
		return nil
	}
	return s.view
}

// Handle holds the view of one topic for a caller that reads it request
// after request (a fetch route of a static topic): it keeps the view it
// last held, so that taking it again is one atomic add, with no look-up by
// topic, no client lock and no readiness check (a view it keeps has caught
// up). An evicted view is never held through it: the hold fails, and the
// handle finds the topic's view again as HoldView does, opening it anew.
type Handle struct {
	views *Views
	topic string
	view  atomic.Pointer[View] // the view last held; nil after its eviction
}

// Handle returns the handle of topic's view; every caller of a topic shares
// one. It opens nothing until the first Hold.
func (c *Views) Handle(topic string) *Handle {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.handles[topic]
	if h == nil {
		h = &Handle{views: c, topic: topic}
		c.handles[topic] = h
	}
	return h
}

// Hold is Views.HoldView of the handle's topic: the view is held until the
// caller calls its Release.
func (h *Handle) Hold(ctx context.Context, wait time.Duration) (*View, error) {
	if v := h.view.Load(); v != nil && v.tryHold() {
		return v, nil
	}
	v, err := h.views.HoldView(ctx, h.topic, wait)
	if err != nil {
		return nil, err
	}
	// Held, so not evicted before this store: the handle never keeps a
	// view after the eviction that clears it.
	h.view.Store(v)
	return v, nil
}

// view opens or finds a view; pinned views (warmed static topics) are never
// evicted.
func (c *Views) view(ctx context.Context, topic string, pin bool) (*View, error) {
	if !pin {
		c.mu.RLock()
		var v *View
		if slot, ok := c.views[topic]; ok {
			v = slot.view
		}
		c.mu.RUnlock()
		if v != nil && v.isReady() {
			return v, nil
		}
	}
	c.mu.Lock()
	slot, ok := c.views[topic]
	if ok && pin {
		slot.pinned = true
	}
	if !ok {
		if err := c.makeRoomLocked(); err != nil {
			c.mu.Unlock()
			return nil, fmt.Errorf("opening a view of %s: %w", topic, err)
		}
		slot = &viewSlot{done: make(chan struct{}), pinned: pin}
		c.views[topic] = slot
		c.wg.Add(1)
		go c.open(topic, slot)
	}
	c.mu.Unlock()

	select {
	case <-slot.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %s: %w", client.ErrNotReady, topic, ctx.Err())
	}
	if slot.err != nil {
		return nil, slot.err
	}
	select {
	case <-slot.view.Ready():
		return slot.view, nil
	case <-ctx.Done():
		if last := slot.view.catchUpErr.Load(); last != nil {
			// Say why it is not ready (a full disk, say), not only that
			// the wait ran out.
			return nil, fmt.Errorf("%w: %s: %w (its catch-up failed: %v)", client.ErrNotReady, topic, ctx.Err(), *last)
		}
		return nil, fmt.Errorf("%w: %s: %w", client.ErrNotReady, topic, ctx.Err())
	}
}

// open describes the topic, catches a new view up and hands it to the live
// consumer. A failed look-up removes the slot so a later call tries again.
func (c *Views) open(topic string, slot *viewSlot) {
	defer c.wg.Done()
	view, err := c.describe(topic)
	if err != nil {
		if errors.Is(err, client.ErrUnknownTopic) {
			err = c.deletedErr(topic, err)
		}
		c.mu.Lock()
		delete(c.views, topic)
		c.mu.Unlock()
		slot.err = err
		close(slot.done)
		return
	}
	c.mu.Lock() // liveView and the eviction read slot.view under mu
	slot.view = view
	delete(c.deleted, topic) // exists again
	c.mu.Unlock()
	close(slot.done)
	for c.ctx.Err() == nil {
		err := c.catchUp(view)
		if err == nil {
			return
		}
		view.catchUpErr.Store(&err)
		if errors.Is(err, ErrStoreFailed) {
			c.storeFailures.Add(1)
		}
		c.logger.Warn("catching up a view failed; retrying", "topic", topic, "err", err)
		select {
		case <-c.ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (c *Views) describe(topic string) (*View, error) {
	ctx, cancel := context.WithTimeout(c.ctx, c.opts.KafkaTimeout)
	defer cancel()
	for {
		res, err := c.admin.DescribeTopics(ctx, kafka.NewTopicCollectionOfTopicNames([]string{topic}))
		if err == nil && len(res.TopicDescriptions) == 1 {
			d := res.TopicDescriptions[0]
			switch d.Error.Code() {
			case kafka.ErrNoError:
				v := newView(topic, follow.TopicID(d.TopicID), len(d.Partitions), c.opts.CoalesceWindow)
				v.serial = c.serials.Add(1)
				if c.opts.Converters != nil {
					v.convert = c.opts.Converters(topic)
				}
				if c.opts.DiskStore != nil && c.opts.DiskStore(topic) {
					if err := c.openStore(v); err != nil {
						return nil, err
					}
				}
				return v, nil
			case kafka.ErrUnknownTopicOrPart, kafka.ErrUnknownTopic:
				return nil, fmt.Errorf("%w: %s", client.ErrUnknownTopic, topic)
			default:
				err = d.Error
			}
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: describing topic %s: %v", client.ErrNotReady, topic, err)
		}
		c.logger.Debug("describing a topic failed; retrying", "topic", topic, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// catchUp reads a new view from the beginning up to the end offsets seen now,
// with a short-lived consumer of its own so a large catch-up never delays the
// live consumer, then assigns the partitions to the live consumer exactly at
// the position reached: no gap, no duplicate.
func (c *Views) catchUp(v *View) error {
	started := time.Now()
	cons, err := kafka.NewConsumer(client.CatchUpConfig(c.opts.Properties, c.opts.KafkaTimeout, c.groupID+"-catchup"))
	if err != nil {
		return fmt.Errorf("creating a catch-up consumer: %w", err)
	}
	stopLogs := make(chan struct{})
	c.wg.Add(1)
	go func() { defer c.wg.Done(); client.ForwardLogs(c.logger, cons.Logs(), "catch-up", stopLogs) }()
	defer func() {
		_ = cons.Close()
		close(stopLogs)
	}()

	topic := v.topic
	n := v.Partitions()
	cu := &catchUp{v: v, end: make([]int64, n), done: make([]bool, n)}
	lo, hi, err := c.watermarks(cons, topic, n)
	if err != nil {
		return err
	}
	if err := c.resumeStore(v, lo, hi); err != nil {
		return err
	}
	var toRead int64
	for p := range n {
		toRead += max(0, hi[p]-max(v.Position(int32(p)), lo[p]))
	}
	v.gatherStore(toRead)
	var assign []kafka.TopicPartition
	for p := 0; p < n; p++ {
		cu.end[p] = hi[p]
		// A view kept on disk resumes from the offsets it stored.
		from := v.Position(int32(p))
		if max(from, lo[p]) >= hi[p] {
			cu.done[p] = true
			v.advance(int32(p), hi[p])
			continue
		}
		cu.remaining++
		off := kafka.OffsetBeginning
		if from > 0 {
			off = kafka.Offset(from)
		}
		assign = append(assign, kafka.TopicPartition{Topic: &topic, Partition: int32(p), Offset: off})
	}
	if cu.remaining > 0 {
		if err := cons.Assign(assign); err != nil {
			return fmt.Errorf("assigning %s to the catch-up consumer: %w", topic, err)
		}
	}
	if err := c.read(cons, cu); err != nil {
		return err
	}
	records := cu.records
	bulk, err := v.flushStore()
	if err != nil {
		return err
	}
	handover := make([]kafka.TopicPartition, n)
	for p := 0; p < n; p++ {
		handover[p] = kafka.TopicPartition{Topic: &topic, Partition: int32(p), Offset: kafka.Offset(v.Position(int32(p)))}
	}
	if err := c.handOver(handover); err != nil {
		return fmt.Errorf("handing %s over to the live consumer: %w", topic, err)
	}
	v.caughtUp = records
	v.markReady()
	c.logger.Debug("view caught up", "topic", topic, "records", records, "took", time.Since(started))
	if bulk {
		c.settle(v)
	}
	return nil
}

// read polls the catch-up consumer on a goroutine of its own and folds its
// events into the view on this one, until every partition is at its end.
// Poll (librdkafka's messages made Go's) and the apply each take most of a
// core at a first load's pace, and one after the other on one goroutine
// they were the whole of it: Poll 6.6 – 7.3 s and the apply 2.7 – 2.9 s of
// a 9.4 – 10.3 s first load of 1,000,000 records of 1 KiB into a store on
// disk. Side by side, three runs alternated with three before: 6.9 – 9.0 s
// against 8.7 – 9.6 s (BENCHMARKS.md).
// The events travel in chunks, so a hand-over costs a channel operation
// per catchUpChunk events, and at most catchUpChunks chunks wait: the
// reader stays that far ahead of the view, no further.
func (c *Views) read(cons *kafka.Consumer, cu *catchUp) error {
	chunks := make(chan []kafka.Event, catchUpChunks)
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			// A chunk waits for its first event, then takes what is
			// queued already: a small catch-up is not held for a full one.
			chunk := make([]kafka.Event, 0, catchUpChunk)
			for wait := 100; len(chunk) < catchUpChunk; wait = 0 {
				ev := cons.Poll(wait)
				if ev == nil {
					break
				}
				chunk = append(chunk, ev)
			}
			select {
			case chunks <- chunk:
			case <-stop:
				return
			}
		}
	}()
	// The consumer is closed once its reader is done with it; what the
	// reader polled past the ends is dropped with it.
	defer func() {
		close(stop)
		<-stopped
	}()
	for cu.remaining > 0 {
		var chunk []kafka.Event
		select {
		case chunk = <-chunks:
		case <-c.ctx.Done():
			return c.ctx.Err()
		}
		for _, ev := range chunk {
			if kerr, ok := ev.(kafka.Error); ok {
				c.logger.Debug("catch-up consumer", "topic", cu.v.topic, "err", kerr)
			} else {
				cu.event(ev)
			}
		}
	}
	return nil
}

// catchUpChunk events are handed from a catch-up's reader to its view at a
// time, and up to catchUpChunks chunks wait (see read).
const (
	catchUpChunk  = 256
	catchUpChunks = 4
)

// settle compacts a view's first load in bulk, in the background once the
// view is ready; a store that fails it takes its view out of service.
func (c *Views) settle(v *View) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if err := v.settleStore(c.ctx); err != nil {
			c.storeFailed(v, err)
		}
	}()
}

// catchUp is the progress of a view's catch-up: per partition the end it
// reads to and whether it is there.
type catchUp struct {
	v         *View
	end       []int64
	done      []bool
	remaining int           // partitions not done
	records   int           // records applied
	rec       client.Record // each message in turn: one Record for the catch-up
}

// event folds one event of the catch-up consumer into the view.
func (cu *catchUp) event(ev kafka.Event) {
	n := len(cu.done)
	switch ev := ev.(type) {
	case *kafka.Message:
		p := ev.TopicPartition.Partition
		if ev.TopicPartition.Error != nil || int(p) >= n || cu.done[p] {
			return
		}
		setRecord(&cu.rec, ev)
		cu.v.apply(&cu.rec)
		cu.records++
		if int64(ev.TopicPartition.Offset)+1 >= cu.end[p] {
			cu.done[p] = true
			cu.remaining--
		}
	case kafka.PartitionEOF:
		p := ev.Partition
		if int(p) >= n || cu.done[p] {
			return
		}
		cu.v.advance(p, int64(ev.Offset))
		if int64(ev.Offset) >= cu.end[p] {
			cu.done[p] = true
			cu.remaining--
		}
	}
}

// pollLive is the one goroutine that polls the live consumer and folds its
// records into the views.
func (c *Views) pollLive() {
	defer c.wg.Done()
	for c.ctx.Err() == nil {
		switch ev := c.live.Poll(100).(type) {
		case *kafka.Message:
			if ev.TopicPartition.Error != nil || ev.TopicPartition.Topic == nil {
				var kerr kafka.Error
				if errors.As(ev.TopicPartition.Error, &kerr) && topicError(kerr.Code()) {
					c.triggerCheck()
				}
				continue
			}
			if v := c.liveView(*ev.TopicPartition.Topic); v != nil {
				if !v.applyLive(toRecord(ev)) {
					c.wentBack(v, ev.TopicPartition.Partition, int64(ev.TopicPartition.Offset))
				} else if err := v.storeErr(); err != nil {
					c.storeFailed(v, err)
				}
			}
		case kafka.PartitionEOF:
			if ev.Topic == nil {
				continue
			}
			if v := c.liveView(*ev.Topic); v != nil && !v.advanceLive(ev.Partition, int64(ev.Offset)) {
				c.wentBack(v, ev.Partition, int64(ev.Offset))
			}
		case kafka.Error:
			c.logger.Debug("live consumer", "err", ev)
			if topicError(ev.Code()) {
				c.triggerCheck()
			}
		case *kafka.Stats:
			c.opts.Stats.Record("views", ev.String())
		}
	}
}

func (c *Views) liveView(topic string) *View {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if s, ok := c.views[topic]; ok && s.view != nil {
		return s.view
	}
	return nil
}

func toRecord(m *kafka.Message) *client.Record {
	r := &client.Record{}
	setRecord(r, m)
	return r
}

// setRecord makes r the record of m, reusing r's headers slice.
func setRecord(r *client.Record, m *kafka.Message) {
	hs := r.Headers[:0]
	if cap(hs) < len(m.Headers) {
		hs = make([]client.Header, 0, len(m.Headers))
	}
	for _, h := range m.Headers {
		hs = append(hs, client.Header{Key: h.Key, Value: h.Value})
	}
	*r = client.Record{
		Topic:     *m.TopicPartition.Topic,
		Partition: m.TopicPartition.Partition,
		Offset:    int64(m.TopicPartition.Offset),
		Timestamp: m.Timestamp,
		Key:       m.Key,
		Value:     m.Value,
		Headers:   hs,
	}
}

// Options returns the views' options, defaults applied: readers built on
// the same cluster (the log tails) take their settings from them.
func (c *Views) Options() Options { return c.opts }

// Logger is the logger of the views' clients, naming the binding.
func (c *Views) Logger() *slog.Logger { return c.logger }

// GroupID is the views' consumer group id; readers built on the views
// derive theirs from it, so that one binding's clients share a prefix.
func (c *Views) GroupID() string { return c.groupID }

// Closed tells whether Close was called.
func (c *Views) Closed() bool { return c.ctx.Err() != nil }
