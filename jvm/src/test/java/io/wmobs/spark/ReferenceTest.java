package io.wmobs.spark;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
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
    judge(rules, keys, arrivals, times, verdicts, state, system, behind);
    long[][] out = new long[n][];
    for (int i = 0; i < n; i++) {
      out[i] = new long[] {system[i], (verdicts[i] & bit) != 0 ? 1 : 0, behind[i]};
    }
    return out;
  }

  /**
   * {@code n} rows judged as the JVM generator takes them: in arrival order, ties in input
   * order, keys interleaved. Out: each row's system timestamp, verdict ({@code verdicts}) and
   * lateness; returns the spread ({@link SubstreamRules.Sorted#finish}).
   */
  static long[] judge(SubstreamRules rules, long[] keys, long[] arrivals, long[] times,
      long[] verdicts, Map<Long, long[]> state, long[] system, long[] behind) {
    Integer[] order = new Integer[keys.length];
    for (int i = 0; i < order.length; i++) {
      order[i] = i;
    }
    java.util.Arrays.sort(order, java.util.Comparator.comparingLong(i -> arrivals[i])); // stable
    SubstreamRules.Sorted sorted = rules.sorted(state, 0);
    for (int i : order) {
      sorted.row(keys[i], times[i], verdicts[i]);
      system[i] = sorted.system;
      verdicts[i] = sorted.verdict;
      behind[i] = sorted.behind;
    }
    return sorted.finish();
  }

  private static SubstreamRules rules(long toleranceUs, boolean drop) {
    return new SubstreamRules(
        toleranceUs, drop, -1, -1, DROPPED_BITS, drop ? OOO_DROPPED : OOO_ADJUSTED);
  }

  @Test
  void theJudgeSaysHowFarTheSlowestKeyRunsBehindTheFastest() {
    SubstreamRules rules = rules(0, false);
    java.util.Map<Long, long[]> state = new java.util.HashMap<>();
    state.put(3L, new long[] {900, 0, -1}); // key 3 seen before, at 900: not in this partition
    long[] keys = {1, 2, 1, 4};
    long[] arrivals = {1, 2, 3, 4};
    long[] times = {100, 700, 300, 50};
    long[] verdicts = {0, 0, 0, EARLY_DROPPED}; // key 4's only row is dropped: no largest
    long[] spread = judge(rules, keys, arrivals, times, verdicts, state, new long[4], new long[4]);
    assertArrayEquals(new long[] {300, 700}, spread); // keys 1 and 2, after their rows
    long none = SubstreamRules.NONE;
    long[] nothing = judge(rules, new long[0], new long[0], new long[0], new long[0], state,
        new long[0], new long[0]);
    assertArrayEquals(new long[] {none, none}, nothing);
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

  /** The verdict bits of {@code wmobs/policy/_verdicts.py}, as the Python engine sends them. */
  private static final Map<String, Integer> BITS =
      Map.of(
          "invalid_time.dropped", 1, "early_arrival.adjusted", 2, "early_arrival.dropped", 4,
          "late_arrival.adjusted", 8, "late_arrival.dropped", 16, "out_of_order.adjusted", 32,
          "out_of_order.dropped", 64);

  private static long judge(PolicyRules rules, PolicyRules.Field field, long event, long arrival,
      long watermarkMs) {
    return rules.judge(field.ordinal(), event, arrival, watermarkMs, arrival / 1000);
  }

  /**
   * The global policy's stateless rules (the JVM engine's {@link PolicyRules}): the arrival
   * policies of every event, and out of order with one event per micro-batch, each judged
   * against the watermark of those before it.
   */
  @Test
  void workedExampleByTheStatelessRules() throws IOException {
    JsonNode reference = load("worked_example.json");
    JsonNode tolerances = reference.get("tolerances_s");
    long early = tolerances.get("early_arrival").asLong() * 1_000_000L;
    long late = tolerances.get("late_arrival").asLong() * 1_000_000L;
    long outOfOrder = tolerances.get("out_of_order").asLong() * 1_000_000L;
    PolicyRules arrivalOnly =
        new PolicyRules(early, true, late, false, PolicyRules.NULL, false, BITS);
    PolicyRules global = new PolicyRules(early, true, late, false, outOfOrder, false, BITS);
    long largest = PolicyRules.NULL;
    for (JsonNode event : reference.get("events")) {
      String what = "#" + event.get("id").asText();
      long time = event.get("event_us").asLong();
      long arrival = event.get("arrival_us").asLong();
      long verdict = judge(arrivalOnly, PolicyRules.Field.VERDICT, time, arrival, PolicyRules.NULL);
      String rule = event.get("arrival_rule").asText(null);
      long expected =
          rule == null ? 0 : BITS.get(rule + "." + event.get("arrival_action").asText());
      assertEquals(expected, verdict, what);
      assertEquals(
          event.get("after_arrival_us").asLong(),
          judge(arrivalOnly, PolicyRules.Field.SYSTEM, time, arrival, PolicyRules.NULL),
          what);
      assertEquals(
          arrival - time, judge(global, PolicyRules.Field.DELAY, time, arrival, PolicyRules.NULL));

      long mark = largest == PolicyRules.NULL ? PolicyRules.NULL : (largest - outOfOrder) / 1000;
      JsonNode want = reference.get("global").get(event.get("id").asText());
      long system = judge(global, PolicyRules.Field.SYSTEM, time, arrival, mark);
      long bits = judge(global, PolicyRules.Field.VERDICT, time, arrival, mark);
      long lateness = judge(global, PolicyRules.Field.LATENESS, time, arrival, mark);
      if (want.get("system_us").isNull()) {
        assertEquals(BITS.get("early_arrival.dropped"), (int) bits, what);
        assertEquals(PolicyRules.NULL, lateness, what);
        continue;
      }
      assertEquals(want.get("system_us").asLong(), system, what);
      assertEquals(want.get("out_of_order").asBoolean(), (bits & OOO_ADJUSTED) != 0, what);
      assertEquals(want.get("lateness_us").asLong(), lateness, what);
      largest = largest == PolicyRules.NULL ? system : Math.max(largest, system);
    }
  }

  @Test
  void nullTimesAndTheBatchTimeStandingInForArrival() {
    PolicyRules rules = new PolicyRules(PolicyRules.NULL, false, 5, true, 0, true, BITS);
    long none = PolicyRules.NULL;
    int verdict = PolicyRules.Field.VERDICT.ordinal();
    // No event time: invalid, dropped, no system timestamp, delay or lateness.
    assertEquals(1, rules.judge(verdict, none, 100, none, 1));
    assertEquals(none, rules.judge(PolicyRules.Field.SYSTEM.ordinal(), none, 100, none, 1));
    assertEquals(none, rules.judge(PolicyRules.Field.DELAY.ordinal(), none, 100, none, 1));
    assertEquals(none, rules.judge(PolicyRules.Field.LATENESS.ordinal(), none, 100, none, 1));
    // No arrival time: the batch's (1 ms) stands in; no queueing delay.
    assertEquals(1000, rules.judge(PolicyRules.Field.ARRIVAL.ordinal(), 10, none, none, 1));
    assertEquals(none, rules.judge(PolicyRules.Field.QUEUE.ordinal(), 10, none, none, 1));
    assertEquals(990, rules.judge(PolicyRules.Field.DELAY.ordinal(), 10, none, none, 1));
    assertEquals(16, rules.judge(verdict, 10, none, none, 1)); // 10 < 1000 - 5: late, dropped
    assertEquals(200, rules.judge(PolicyRules.Field.QUEUE.ordinal(), 990, 800, none, 1));
    // Behind the watermark (1 ms), dropped; a late row is not judged again.
    assertEquals(64, rules.judge(verdict, 999, 1000, 1, 1));
    assertEquals(none, rules.judge(PolicyRules.Field.LATENESS.ordinal(), 10, none, 1, 1));
    assertEquals(1, rules.judge(PolicyRules.Field.LATENESS.ordinal(), 999, 1000, 1, 1));
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
  void rowsTakenOneAtATimeAreJudgedAsTheReferenceSays() throws IOException {
    // The JVM generator hands the judge a partition's rows sorted by key, arrival and the order
    // they came in; a key whose rows come in several runs (here: all keys' rows interleaved in
    // arrival order) resumes from its state, as the next micro-batch would.
    for (JsonNode c : load("substream_streams.json").get("cases")) {
      boolean drop = c.get("drop").asBoolean();
      long bit = drop ? OOO_DROPPED : OOO_ADJUSTED;
      SubstreamRules rules = rules(c.get("tolerance_us").asLong(), drop);
      for (boolean byKey : new boolean[] {true, false}) {
        Map<Long, long[]> state = new HashMap<>();
        for (JsonNode batch : c.get("batches")) {
          JsonNode rows = batch.get("rows");
          List<Integer> order = new ArrayList<>();
          for (int i = 0; i < rows.size(); i++) {
            order.add(i);
          }
          java.util.Comparator<Integer> byArrival =
              java.util.Comparator.comparingLong(i -> rows.get(i).get(1).asLong());
          order.sort(
              byKey
                  ? java.util.Comparator.<Integer>comparingLong(i -> rows.get(i).get(0).asLong())
                      .thenComparing(byArrival)
                  : byArrival); // stable: ties in the order they came
          SubstreamRules.Sorted sorted = rules.sorted(state, 0);
          for (int i : order) {
            JsonNode row = rows.get(i);
            long verdict = row.get(3).asBoolean() ? 0 : EARLY_DROPPED;
            sorted.row(row.get(0).asLong(), row.get(2).asLong(), verdict);
            JsonNode expected = batch.get("expected").get(i);
            String what = "case " + c.get("case") + " row " + i + (byKey ? " by key" : "");
            assertEquals(expected.get(0).asLong(), sorted.system, what);
            assertEquals(expected.get(1).asBoolean(), (sorted.verdict & bit) != 0, what);
            assertEquals(expected.get(2).asLong(), sorted.behind, what);
          }
          sorted.finish();
          Map<String, Long> after = new TreeMap<>();
          state.forEach((key, s) -> after.put(Long.toString(key), s[0]));
          Map<String, Long> wanted = new TreeMap<>();
          batch.get("state_after").fields()
              .forEachRemaining(e -> wanted.put(e.getKey(), e.getValue().asLong()));
          assertEquals(wanted, after, "case " + c.get("case"));
        }
      }
    }
  }

  @Test
  void batchInput() throws IOException {
    for (JsonNode c : load("batch_input.json").get("cases")) {
      List<String> before = null;
      if (!c.get("before").isNull()) {
        before = new ArrayList<>();
        for (JsonNode line : c.get("before")) {
          before.add(line.asText());
        }
      }
      List<String> now = new ArrayList<>();
      for (JsonNode line : c.get("now")) {
        now.add(line.asText());
      }
      assertEquals(
          c.get("read_input").asBoolean(), IdleClock.readInput(now, before), c.get("case").asText());
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
    judge(rules(0, false), new long[] {9}, new long[] {1}, new long[] {5}, verdicts, state,
        new long[1], new long[1]);
    assertNull(state.get(9L));
  }
}
