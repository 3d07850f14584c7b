package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// result is the outcome of one scenario.
type result interface{ isResult() }

func report(w io.Writer, asJSON bool, r result) error {
	if asJSON {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	var b strings.Builder
	switch r := r.(type) {
	case fetchResult:
		reportFetch(&b, r)
	case longPollResult:
		reportLongPoll(&b, r)
	case requestReplyResult:
		reportRequestReply(&b, r)
	case onewayResult:
		reportOneway(&b, r)
	case viewScaleResult:
		reportViewScale(&b, r)
	case idleRoutesResult:
		reportIdleRoutes(&b, r)
	case fanoutResult:
		reportFanout(&b, r)
	case modelsResult:
		reportModels(&b, r)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func reportFetch(b *strings.Builder, r fetchResult) {
	fmt.Fprintf(b, "%s: %d clients over %d ext_proc connections, %d round(s) of %s per target, %d-byte answer\n",
		r.Scenario, r.Clients, r.Conns, r.Rounds, r.Duration, r.BodyBytes)
	for _, s := range []struct {
		name string
		r    rate
	}{{"no-op", r.Noop}, {"processor", r.Processor}} {
		fmt.Fprintf(b, "  %-9s %8.0f req/s  (%d requests, %d errors; rounds %s)\n",
			s.name, s.r.PerSecond, s.r.Requests, s.r.Errors, roundList(s.r.RoundPerSecond))
		fmt.Fprintf(b, "            all processes: %6.1f allocs/req %8.0f B/req %6.1f µs CPU/req\n", s.r.All.Allocs, s.r.All.Bytes, s.r.All.CPUus)
		if s.r.Server != nil {
			fmt.Fprintf(b, "            server alone:  %6.1f allocs/req %8.0f B/req %6.1f µs CPU/req\n", s.r.Server.Allocs, s.r.Server.Bytes, s.r.Server.CPUus)
		}
	}
	fmt.Fprintf(b, "  ratio     %.2f × the no-op rate (issue 9 target ≥ %.1f)\n", r.Ratio, r.Target)
	fmt.Fprintf(b, "            all processes: allocations %.2f ×, CPU %.2f × the no-op's per request (+%.1f allocs, +%.1f µs)\n",
		r.AllocRatio, r.CPURatio, r.ExtraAllocsPerReq, r.ExtraCPUusPerReq)
	if r.Split {
		fmt.Fprintf(b, "            server alone:  allocations %.2f × (issue 9 target ≤ 2), CPU %.2f × the no-op's per request\n",
			r.ServerAllocRatio, r.ServerCPURatio)
	} else {
		fmt.Fprintf(b, "            (the client side is in both: these understate the server-side ratios; -split measures the server alone)\n")
	}
	where := "this process"
	if r.Split {
		where = "the server process"
	}
	fmt.Fprintf(b, "  idle      %s with no load: %.0f allocs/s, %.1f ms CPU/s; without it: allocations %.2f ×, CPU %.2f × the no-op's per request\n",
		where, r.Background.Allocs, r.Background.CPUms, r.NetAllocRatio, r.NetCPURatio)
}

func reportLongPoll(b *strings.Builder, r longPollResult) {
	fmt.Fprintf(b, "%s: %d waiters over %d ext_proc connections, one write\n", r.Scenario, r.Processor.Waiters, r.Conns)
	for _, s := range []struct {
		name string
		f    waitFigures
	}{{"no-op", r.Noop}, {"processor", r.Processor}} {
		fmt.Fprintf(b, "  %-9s registered in %.2fs; answered after min %.1f / p50 %.1f / p99 %.1f / max %.1f ms\n",
			s.name, s.f.RegisterSeconds, s.f.WakeMinMs, s.f.WakeP50Ms, s.f.WakeP99Ms, s.f.WakeMaxMs)
		fmt.Fprintf(b, "            all processes: %s\n", waiterMemory(s.f.All))
		if s.f.Server != nil {
			fmt.Fprintf(b, "            server alone:  %s\n", waiterMemory(*s.f.Server))
		}
	}
	fmt.Fprintf(b, "  write acknowledged %.1f ms after the produce call\n", r.AckMs)
	fmt.Fprintf(b, "  ratio     wake-up max %.2f × the no-op's (issue 9 target: all within %.0f ms at 10,000 waiters)\n", r.WakeRatio, r.TargetWakeMs)
	fmt.Fprintf(b, "            all processes: memory %.2f × the no-op's, %+.0f B/waiter over an open stream\n", r.MemRatio, r.ExtraBytesPerWaiter)
	if r.Split {
		fmt.Fprintf(b, "            server alone:  %.0f B/waiter, %.2f × the no-op's (heap %.2f ×, stacks %.2f ×; issue 9 target ≤ %.0f B)\n",
			r.Processor.Server.Bytes, r.ServerMemRatio, r.ServerHeapRatio, r.ServerStackRatio, r.TargetBytes)
		fmt.Fprintf(b, "            wake-up CPU:   %.1f µs/waiter, %.2f × the no-op's %.1f µs; %.1f allocs/waiter (no-op %.1f)\n",
			r.Processor.WakeCPUus, r.ServerWakeCPURatio, r.Noop.WakeCPUus, r.Processor.WakeAllocs, r.Noop.WakeAllocs)
	} else {
		fmt.Fprintf(b, "            (the client side's streams are in both: %.0f B/waiter is an upper bound of the processor's, target ≤ %.0f B; -split measures the server alone)\n",
			r.Processor.All.Bytes, r.TargetBytes)
	}
}

func waiterMemory(p perWaiter) string {
	return fmt.Sprintf("%6.0f B/waiter (heap %.0f + stacks %.0f), %.2f goroutines/waiter", p.Bytes, p.Heap, p.Stacks, p.Goroutines)
}

func roundList(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(parts, "/")
}

func reportRequestReply(b *strings.Builder, r requestReplyResult) {
	fmt.Fprintf(b, "%s: POST /orders/{id} (%d-byte body, %d-byte reply) answered by the demo responder; %d round(s) of %s per target and concurrency, over %d ext_proc connections\n",
		r.Scenario, r.BodyBytes, r.ReplyBytes, r.Rounds, r.Duration, r.Conns)
	fmt.Fprintf(b, "  the raw loop's request records carry %d headers\n", r.RawHeaders)
	reportRRFigures(b, r.Concurrency, [4]rrFigures{r.GatewayOne, r.RawOne, r.HopOne, r.MachineryOne}, [4]rrFigures{r.GatewayMany, r.RawMany, r.HopMany, r.MachineryMany})
	fmt.Fprintf(b, "  ratio     median round trip %.2f × the raw loop's (issue 9 target ≤ %.0f); p99 %.2f ×\n", r.LatencyRatio, r.TargetLatency, r.LatencyP99Ratio)
	fmt.Fprintf(b, "            rate with %d in flight %.2f × the raw loop's (issue 9 target ≥ %.1f); with 1 in flight %.2f ×\n",
		r.Concurrency, r.RateRatio, r.TargetRate, r.RateOneRatio)
	fmt.Fprintf(b, "            rate with %d in flight %.2f × the hop baseline's (the raw loop behind an ext_proc hop), which reaches %.2f × the raw loop's\n",
		r.Concurrency, r.HopRateRatio, r.HopCeilingRatio)
	reportMachinery(b, r.Concurrency, r.machineryRatios)
	fmt.Fprintf(b, "            CPU per request with %d in flight %.2f × the raw loop's over every process", r.Concurrency, r.CPURatio)
	if r.Split {
		fmt.Fprintf(b, ", %.2f × in the server process", r.ServerCPURatio)
	}
	b.WriteString("\n")
}

// reportMachinery writes the machinery baseline's ratios.
func reportMachinery(b *strings.Builder, n int, m machineryRatios) {
	fmt.Fprintf(b, "            rate with %d in flight %.2f × the machinery baseline's (the hop's raw work behind the processor's exchange machinery), which reaches %.2f × the hop's (the ceiling); by CPU per request %.2f and %.2f\n",
		n, m.OwnRatio, m.CeilingRatio, m.OwnCPURatio, m.CeilingCPURatio)
}

// reportRRFigures writes the figures of the gateway, the raw loop, the hop
// baseline and the machinery baseline, one and n in flight.
func reportRRFigures(b *strings.Builder, n int, one, many [4]rrFigures) {
	for _, s := range []struct {
		name string
		f    rrFigures
	}{
		{"gateway, 1 in flight", one[0]}, {"raw, 1 in flight", one[1]}, {"hop, 1 in flight", one[2]},
		{"machinery, 1 in flight", one[3]},
		{fmt.Sprintf("gateway, %d in flight", n), many[0]}, {fmt.Sprintf("raw, %d in flight", n), many[1]},
		{fmt.Sprintf("hop, %d in flight", n), many[2]}, {fmt.Sprintf("machinery, %d in flight", n), many[3]},
	} {
		fmt.Fprintf(b, "  %-22s %8.0f req/s  p50 %6.2f / p99 %6.2f / max %6.1f ms  (%d requests; rounds %s)\n",
			s.name, s.f.PerSecond, s.f.Latency.P50Ms, s.f.Latency.P99Ms, s.f.Latency.MaxMs, s.f.Requests, roundList(s.f.RoundPerSecond))
		fmt.Fprintf(b, "                         all processes: %6.1f allocs/req %6.1f µs CPU/req", s.f.All.Allocs, s.f.All.CPUus)
		if s.f.Server != nil {
			fmt.Fprintf(b, "; server alone: %6.1f allocs/req %6.1f µs CPU/req", s.f.Server.Allocs, s.f.Server.CPUus)
		}
		if s.f.MachineCores > 0 {
			fmt.Fprintf(b, "; machine busy %.2f cores", s.f.MachineCores)
		}
		b.WriteString("\n")
	}
}

func reportOneway(b *strings.Builder, r onewayResult) {
	fmt.Fprintf(b, "%s: POST /events/{id} (%d-byte body, answered 204) vs the raw librdkafka write; %d round(s) of %s per target and concurrency, over %d ext_proc connections\n",
		r.Scenario, r.BodyBytes, r.Rounds, r.Duration, r.Conns)
	fmt.Fprintf(b, "  the raw write's records carry %d headers\n", r.RawHeaders)
	reportRRFigures(b, r.Concurrency, [4]rrFigures{r.GatewayOne, r.RawOne, r.HopOne, r.MachineryOne}, [4]rrFigures{r.GatewayMany, r.RawMany, r.HopMany, r.MachineryMany})
	fmt.Fprintf(b, "  ratio     rate with %d in flight %.2f × the hop baseline's (issue 20 target ≥ %.1f), which reaches %.2f × the raw write's; gateway ÷ raw %.2f\n",
		r.Concurrency, r.HopRateRatio, r.TargetHopRate, r.HopCeilingRatio, r.RateRatio)
	reportMachinery(b, r.Concurrency, r.machineryRatios)
	fmt.Fprintf(b, "            median with 1 in flight %.2f × the raw write's, %.2f × the hop's; CPU per request with %d in flight %.2f × the hop's over every process\n",
		r.LatencyRatio, r.HopLatencyRatio, r.Concurrency, r.HopCPURatio)
}

func reportViewScale(b *strings.Builder, r viewScaleResult) {
	fmt.Fprintf(b, "%s: %d keys × %d B over %d partitions (written in %.1fs), beside a view of %d keys\n",
		r.Scenario, r.Keys, r.ValueBytes, r.Partitions, r.FillSeconds, r.SmallKeys)
	fmt.Fprintf(b, "  load      raw librdkafka consumer to the end %.2fs; processor start to views ready %.2fs: %.2f × (issue 20 target ≤ 1.5)\n",
		r.RawSeconds, r.ReadySeconds, r.LoadRatio)
	fmt.Fprintf(b, "  floor     the raw read keeping each value by key in a map[string][]byte %.2fs: %.2f × the raw read, %.0f B per key over the key and value\n",
		r.MapSeconds, r.MapRatio, r.MapOverheadPerKey)
	fmt.Fprintf(b, "  memory    Go heap %d B for %d B of keys and values: %.0f B per key, %.0f B over the key and value (target ≤ 64), %.2f ×\n",
		r.HeapBytes, r.LiveBytes, r.HeapPerKey, r.OverheadPerKey, r.MemRatio)
	fmt.Fprintf(b, "  GET       single key, big view %.0f req/s, small view %.0f req/s: %.2f × (rounds %s / %s)\n",
		r.BigGet.PerSecond, r.SmallGet.PerSecond, r.GetRatio, roundList(r.BigGet.RoundPerSecond), roundList(r.SmallGet.RoundPerSecond))
	fmt.Fprintf(b, "  wake-up   a long poll woken by a write, median of %d: big view %.1f ms, small view %.1f ms: %.2f ×\n",
		viewWakeRounds, r.BigWakeMs, r.SmallWakeMs, r.WakeRatio)
}

func reportIdleRoutes(b *strings.Builder, r idleRoutesResult) {
	fmt.Fprintf(b, "%s: %d fetch routes on a topic each, views ready %.2fs after the start\n", r.Scenario, r.Routes, r.ReadySeconds)
	fmt.Fprintf(b, "  idle      %.1f %% of a core with the processor, %.1f %% before it (over %.0fs each): %.2f %% its own (issue 20 target ≤ 1 %%)\n",
		100*r.WithProcessorCores, 100*r.BaselineCores, r.IdleSeconds, 100*r.IdleCores)
	if r.LibrdkafkaCores != nil {
		fmt.Fprintf(b, "            of which librdkafka's threads %.2f %%, Go code (the processor's and the broker's answers to it) %.2f %%\n",
			100**r.LibrdkafkaCores, 100*(r.IdleCores-*r.LibrdkafkaCores))
	}
	fmt.Fprintf(b, "  baseline  a raw consumer of the same partitions with the live consumer's settings %.2f %%", 100*r.RawConsumerCores)
	if r.RawLibrdkafkaCores != nil {
		fmt.Fprintf(b, " (librdkafka's threads %.2f %%)", 100**r.RawLibrdkafkaCores)
	}
	fmt.Fprintf(b, ": the processor's idle cost is %.2f × it\n", r.IdleRatio)
	if r.LibrdkafkaThreadCounts != nil {
		fmt.Fprintf(b, "  clients   librdkafka clients alive (rdk:main threads): processor %d, baseline %d\n",
			r.LibrdkafkaThreadCounts["rdk:main"], r.RawLibrdkafkaThreadCounts["rdk:main"])
	}
	fmt.Fprintf(b, "  requests  the broker answered in the window: processor %s; baseline %s\n", requestList(r.BrokerRequests), requestList(r.RawBrokerRequests))
	fmt.Fprintf(b, "  memory    per route %.0f B heap, %.0f B stacks, %.2f goroutines\n", r.HeapPerRoute, r.StacksPerRoute, r.GoroutinesPerRoute)
	fmt.Fprintf(b, "  GET       one to each route %.0f req/s, as many to one route %.0f req/s: %.2f ×; one more to each route %.0f req/s: %.2f ×\n",
		r.AllRoutesPerSecond, r.OneRoutePerSecond, r.RouteRatio, r.AgainRoutesPerSecond, r.AgainRouteRatio)
	fmt.Fprintf(b, "            CPU per GET (all of this process) %.0f / %.0f / %.0f µs: the one route's ÷ the first pass's %.2f ×, ÷ the second's %.2f ×\n",
		r.AllRoutesCPUMicros, r.OneRouteCPUMicros, r.AgainRoutesCPUMicros, r.RouteCPURatio, r.AgainRouteCPURatio)
}

func reportFanout(b *strings.Builder, r fanoutResult) {
	fmt.Fprintf(b, "%s: %d streams over %d ext_proc connections (opened in %.2fs), %d-byte records at %d/s for %.0fs\n",
		r.Scenario, r.Streams, r.Conns, r.RegisterSeconds, r.RecordBytes, r.Rate, r.Seconds)
	fmt.Fprintf(b, "  written   %d records in %.2fs (%.0f/s)\n", r.Written, r.WriteSeconds, r.WrittenPerSecond)
	fmt.Fprintf(b, "  delivered %d to %d records per stream, %d of %d streams complete; %.0f records/s over all streams\n",
		r.DeliveredMin, r.DeliveredMax, r.StreamsComplete, r.Streams, r.DeliveredPerSecond)
	fmt.Fprintf(b, "  lag       streams: p50 %.1f / p99 %.1f / max %.1f ms (worst stream's p99 %.1f ms; issue 9 target p99 ≤ %.0f ms)\n",
		r.Lag.P50Ms, r.Lag.P99Ms, r.Lag.MaxMs, r.WorstStreamP99Ms, r.TargetP99Ms)
	fmt.Fprintf(b, "            raw librdkafka consumer: p50 %.1f / p99 %.1f / max %.1f ms\n", r.Raw.P50Ms, r.Raw.P99Ms, r.Raw.MaxMs)
	fmt.Fprintf(b, "  ratio     lag p50 %.2f ×, p99 %.2f × the raw consumer's\n", r.LagP50Ratio, r.LagP99Ratio)
	fmt.Fprintf(b, "  cores     client process %.2f", r.ClientCores)
	if r.Split {
		fmt.Fprintf(b, ", server process %.2f", r.ServerCores)
	}
	if r.MachineCores > 0 {
		fmt.Fprintf(b, "; the whole machine %.2f of %d", r.MachineCores, r.MachineCPUs)
	}
	fmt.Fprintf(b, "\n  per record delivered: all processes %.2f allocs, %.2f µs CPU", r.All.Allocs, r.All.CPUus)
	if r.Server != nil {
		fmt.Fprintf(b, "; server alone %.2f allocs, %.2f µs CPU", r.Server.Allocs, r.Server.CPUus)
	}
	b.WriteString("\n")
}
