# Medians of several kafka-ext-proc-load -json runs, per scenario.
#   jq -s -f medians.jq runs.jsonl
# Each number (a figure, a ratio, a parameter) is [median, min, max] over
# the runs; strings and booleans are the first run's, lists and maps (the
# rounds' rates, thread and request counts) are left out but "targets";
# "runs" counts the runs.
def median: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
def r2: . * 100 | round / 100;
def stat(f): [.[] | f | select(. != null)] | if length == 0 then null else [(median | r2), (min | r2), (max | r2)] end;
def names: reduce (.[] | keys_unsorted[]) as $k ([]; if index([$k]) then . else . + [$k] end);

group_by(.scenario) | map(
  . as $runs
  | reduce ($runs | names[]) as $k ({scenario: $runs[0].scenario, runs: ($runs | length)};
      ($runs | map(.[$k] | select(. != null)) | .[0]) as $v
      | if $k == "scenario" then .
        elif ($v | type) == "number" then .[$k] = ($runs | stat(.[$k]))
        elif ($v | type) == "array" or (($v | type) == "object" and $k != "targets") then .
        else .[$k] = $v end))
