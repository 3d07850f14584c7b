# Medians of several kafka-ext-proc-load -json runs, per scenario.
#   jq -s -f cmd/kafka-ext-proc-load/medians.jq runs.jsonl
# Each figure is [median, min, max] over the runs; "runs" counts them.
def median: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
def r2: . * 100 | round / 100;
def stat(f): [.[] | f | select(. != null)] | if length == 0 then null else [(median | r2), (min | r2), (max | r2)] end;

group_by(.scenario) | map(
  if .[0].scenario == "request-reply" then {
    scenario: .[0].scenario, runs: length, split: .[0].split, concurrency: .[0].concurrency,
    latency_ratio: stat(.latency_ratio),
    latency_p99_ratio: stat(.latency_p99_ratio),
    rate_ratio: stat(.rate_ratio),
    rate_1_ratio: stat(.rate_1_ratio),
    gateway_1_p50_ms: stat(.gateway_1.latency.p50_ms),
    gateway_1_p99_ms: stat(.gateway_1.latency.p99_ms),
    raw_1_p50_ms: stat(.raw_1.latency.p50_ms),
    raw_1_p99_ms: stat(.raw_1.latency.p99_ms),
    gateway_1_req_per_s: stat(.gateway_1.req_per_s),
    raw_1_req_per_s: stat(.raw_1.req_per_s),
    gateway_n_req_per_s: stat(.gateway_n.req_per_s),
    raw_n_req_per_s: stat(.raw_n.req_per_s),
    gateway_n_p50_ms: stat(.gateway_n.latency.p50_ms),
    raw_n_p50_ms: stat(.raw_n.latency.p50_ms)
  } elif .[0].scenario == "grpc-fanout" then {
    scenario: .[0].scenario, runs: length, split: .[0].split, streams: .[0].streams, rate: .[0].target_records_per_s,
    lag_p50_ms: stat(.lag.p50_ms),
    lag_p99_ms: stat(.lag.p99_ms),
    lag_max_ms: stat(.lag.max_ms),
    worst_stream_p99_ms: stat(.worst_stream_p99_ms),
    raw_lag_p50_ms: stat(.raw_lag.p50_ms),
    raw_lag_p99_ms: stat(.raw_lag.p99_ms),
    lag_p50_ratio: stat(.lag_p50_ratio),
    lag_p99_ratio: stat(.lag_p99_ratio),
    delivered_min_per_stream: stat(.delivered_min_per_stream),
    written: stat(.written),
    written_per_s: stat(.written_per_s),
    delivered_per_s: stat(.delivered_per_s),
    register_s: stat(.register_seconds),
    client_cores: stat(.client_cores),
    server_cores: stat(.server_cores),
    machine_cores: stat(.machine_cores),
    all_allocs_per_record: stat(.all_per_record.allocs_per_req),
    all_cpu_us_per_record: stat(.all_per_record.cpu_us_per_req),
    server_allocs_per_record: stat(.server_per_record.allocs_per_req),
    server_cpu_us_per_record: stat(.server_per_record.cpu_us_per_req)
  } elif .[0].scenario == "longpoll" then {
    scenario: .[0].scenario, runs: length, waiters: .[0].processor.waiters, split: .[0].split,
    wake_ratio: stat(.wake_ratio),
    processor_wake_p50_ms: stat(.processor.wake_p50_ms),
    processor_wake_p99_ms: stat(.processor.wake_p99_ms),
    processor_wake_max_ms: stat(.processor.wake_max_ms),
    noop_wake_max_ms: stat(.noop.wake_max_ms),
    processor_register_s: stat(.processor.register_seconds),
    ack_ms: stat(.ack_ms),
    processor_all_bytes_per_waiter: stat(.processor.all.bytes_per_waiter),
    noop_all_bytes_per_waiter: stat(.noop.all.bytes_per_waiter),
    extra_bytes_per_waiter: stat(.extra_bytes_per_waiter),
    processor_server_bytes_per_waiter: stat(.processor.server.bytes_per_waiter),
    processor_server_heap_per_waiter: stat(.processor.server.heap_bytes_per_waiter),
    processor_server_stacks_per_waiter: stat(.processor.server.stack_bytes_per_waiter),
    processor_server_goroutines_per_waiter: stat(.processor.server.goroutines_per_waiter),
    noop_server_bytes_per_waiter: stat(.noop.server.bytes_per_waiter),
    server_mem_ratio: stat(.server_mem_ratio)
  } else {
    scenario: .[0].scenario, runs: length, split: .[0].split,
    ratio: stat(.ratio),
    processor_req_per_s: stat(.processor.req_per_s),
    noop_req_per_s: stat(.noop.req_per_s),
    processor_all_allocs_per_req: stat(.processor.all.allocs_per_req),
    noop_all_allocs_per_req: stat(.noop.all.allocs_per_req),
    alloc_ratio: stat(.alloc_ratio),
    cpu_ratio: stat(.cpu_ratio),
    processor_all_cpu_us_per_req: stat(.processor.all.cpu_us_per_req),
    noop_all_cpu_us_per_req: stat(.noop.all.cpu_us_per_req),
    processor_server_allocs_per_req: stat(.processor.server.allocs_per_req),
    noop_server_allocs_per_req: stat(.noop.server.allocs_per_req),
    processor_server_bytes_per_req: stat(.processor.server.bytes_per_req),
    noop_server_bytes_per_req: stat(.noop.server.bytes_per_req),
    processor_server_cpu_us_per_req: stat(.processor.server.cpu_us_per_req),
    noop_server_cpu_us_per_req: stat(.noop.server.cpu_us_per_req),
    server_alloc_ratio: stat(.server_alloc_ratio),
    server_cpu_ratio: stat(.server_cpu_ratio),
    background_allocs_per_s: stat(.background.allocs_per_s),
    background_cpu_ms_per_s: stat(.background.cpu_ms_per_s),
    net_alloc_ratio: stat(.net_alloc_ratio),
    net_cpu_ratio: stat(.net_cpu_ratio)
  } end)
