package io.wmobs.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.InputStream;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.junit.jupiter.api.Test;

/**
 * The JVM engine's pure rules against the reference cases in {@code tests/reference/}, the
 * same files pytest reads for the Python engine ({@code tests/unit/test_reference.py}).
 */
class ReferenceTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final long EARLY_DROPPED = 4;
  private static final long DROPPED_BITS = 1 | 4 | 16 | 64;
  private static final long OOO_ADJUSTED = 32;
  private static final long OOO_DROPPED = 64;

  static JsonNode load(String name) throws IOException {
    try (InputStream in = ReferenceTest.class.getResourceAsStream("/reference/" + name)) {
      if (in == null) {
        throw new IOException("no reference case " + name + " (tests/reference/)");
      }
      return JSON.readTree(in);
    }
  }

  /** Rows {@code [key, arrival, ts, candidate]} judged: per row {system, out of order, lateness}. */
  static long[][] judge(SubstreamRules rules, Map<Long, long[]> state, JsonNode rows, long bit) {
    int n = rows.size();
    long[] keys = new long[n];
    long[] arrivals = new long[n];
    long[] times = new long[n];
    long[] verdicts = new long[n];
    for (int i = 0; i < n; i++) {
      JsonNode row = rows.get(i);
      keys[i] = row.get(0).asLong();
      arrivals[i] = row.get(1).asLong();
      times[i] = row.get(2).asLong();
      verdicts[i] = row.get(3).asBoolean() ? 0 : EARLY_DROPPED;
    }
    long[] system = new long[n];
    long[] behind = new long[n];
    rules.judge(n, keys, arrivals, times, verdicts, state, 0, system, behind);
    long[][] out = new long[n][];
    for (int i = 0; i < n; i++) {
      out[i] = new long[] {system[i], (verdicts[i] & bit) != 0 ? 1 : 0, behind[i]};
    }
    return out;
  }

  private static SubstreamRules rules(long toleranceUs, boolean drop) {
    return new SubstreamRules(
        toleranceUs, drop, -1, -1, DROPPED_BITS, drop ? OOO_DROPPED : OOO_ADJUSTED);
  }

  @Test
  void workedExampleGlobalAndPerDevice() throws IOException {
    JsonNode reference = load("worked_example.json");
    long tolerance = reference.get("tolerances_s").get("out_of_order").asLong() * 1_000_000L;
    JsonNode events = reference.get("events");
    for (String how : List.of("global", "substreams")) {
      List<List<Object>> rows = new ArrayList<>();
      Map<String, Long> devices = new TreeMap<>();
      for (JsonNode event : events) {
        devices.putIfAbsent(event.get("device").asText(), (long) devices.size());
      }
      for (JsonNode event : events) {
        long key = how.equals("global") ? 0 : devices.get(event.get("device").asText());
        boolean candidate = !"dropped".equals(event.path("arrival_action").asText(""));
        rows.add(
            List.of(
                key,
                event.get("arrival_us").asLong(),
                event.get("after_arrival_us").asLong(),
                candidate));
      }
      long[][] judged =
          judge(rules(tolerance, false), new HashMap<>(), JSON.valueToTree(rows), OOO_ADJUSTED);
      for (int i = 0; i < events.size(); i++) {
        JsonNode expected = reference.get(how).get(events.get(i).get("id").asText());
        if (expected.get("system_us").isNull()) {
          continue; // dropped by early arrival: passes the judge untouched
        }
        String what = how + " #" + events.get(i).get("id").asText();
        assertEquals(expected.get("system_us").asLong(), judged[i][0], what);
        assertEquals(expected.get("out_of_order").asBoolean() ? 1 : 0, judged[i][1], what);
        assertEquals(expected.get("lateness_us").asLong(), judged[i][2], what);
      }
    }
  }

  @Test
  void randomStreamsOfManyKeys() throws IOException {
    for (JsonNode c : load("substream_streams.json").get("cases")) {
      boolean drop = c.get("drop").asBoolean();
      SubstreamRules rules = rules(c.get("tolerance_us").asLong(), drop);
      Map<Long, long[]> state = new HashMap<>();
      for (JsonNode batch : c.get("batches")) {
        long[][] judged = judge(rules, state, batch.get("rows"), drop ? OOO_DROPPED : OOO_ADJUSTED);
        JsonNode expected = batch.get("expected");
        for (int i = 0; i < judged.length; i++) {
          String what = "case " + c.get("case") + " row " + i;
          assertEquals(expected.get(i).get(0).asLong(), judged[i][0], what);
          assertEquals(expected.get(i).get(1).asBoolean() ? 1 : 0, judged[i][1], what);
          assertEquals(expected.get(i).get(2).asLong(), judged[i][2], what);
        }
        Map<String, Long> after = new TreeMap<>();
        state.forEach((key, s) -> after.put(Long.toString(key), s[0]));
        Map<String, Long> wanted = new TreeMap<>();
        batch.get("state_after").fields().forEachRemaining(e -> wanted.put(e.getKey(), e.getValue().asLong()));
        assertEquals(wanted, after, "case " + c.get("case"));
      }
    }
  }

  @Test
  void idleClockTimelines() throws IOException {
    for (JsonNode c : load("idle_clock.json").get("cases")) {
      long timeout = c.get("timeout_ms").asLong();
      JsonNode start = c.get("clock");
      long[] clock = {
        start.get("max_us").asLong(), start.get("seen_ms").asLong(), start.get("advanced_ms").asLong()
      };
      for (JsonNode step : c.get("steps")) {
        String what = "case " + c.get("case");
        if (step.has("input_ms")) {
          clock[1] = step.get("input_ms").asLong();
          clock[2] = -1;
        } else {
          int result = IdleClock.advance(clock, step.get("now_ms").asLong(), timeout);
          String name =
              result == IdleClock.FIRED ? "fired" : result == IdleClock.MOVED ? "moved" : "active";
          assertEquals(step.get("result").asText(), name, what);
        }
        JsonNode after = step.get("after");
        assertEquals(after.get("max_us").asLong(), clock[0], what);
        assertEquals(after.get("seen_ms").asLong(), clock[1], what);
        assertEquals(after.get("advanced_ms").asLong(), clock[2], what);
      }
    }
  }

  @Test
  void histogramBucketEdges() throws IOException {
    JsonNode reference = load("histogram_buckets.json");
    reference.fields().forEachRemaining(entry -> {
      JsonNode bounds = entry.getValue().get("bounds_us");
      long[] parsed = new long[bounds.size()];
      for (int i = 0; i < parsed.length; i++) {
        parsed[i] = bounds.get(i).asLong();
      }
      int last = 0;
      for (JsonNode value : entry.getValue().get("values")) {
        long v = value.get(0).asLong();
        int expected = value.get(1).asInt();
        // From any bucket found before: the search starts at the last one.
        assertEquals(expected, Observation.digit(parsed, v, 0), entry.getKey() + " " + v);
        assertEquals(expected, Observation.digit(parsed, v, last), entry.getKey() + " " + v);
        assertEquals(expected, Observation.digit(parsed, v, parsed.length), entry.getKey() + " " + v);
        last = expected;
      }
    });
  }

  @Test
  void noStateIsKeptForAKeyWhoseRowsAllDropped() {
    Map<Long, long[]> state = new HashMap<>();
    long[] verdicts = {EARLY_DROPPED};
    rules(0, false)
        .judge(1, new long[] {9}, new long[] {1}, new long[] {5}, verdicts, state, 0, new long[1], new long[1]);
    assertNull(state.get(9L));
  }
}
