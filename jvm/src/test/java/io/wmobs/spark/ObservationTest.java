package io.wmobs.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.Random;
import org.junit.jupiter.api.Test;

/** The observation's counts: merging tasks' partial counts equals counting all rows at once. */
class ObservationTest {
  private static final ObjectMapper JSON = new ObjectMapper();

  static Observation observation() throws Exception {
    JsonNode buckets = ReferenceTest.load("histogram_buckets.json");
    String spec =
        "{\"counts\": [[\"rule:early_arrival:dropped\", 4], [\"rule:out_of_order:adjusted\", 32]],"
            + " \"dropped_bits\": 85, \"dead_letters\": \"dead_letter_rows\","
            + " \"firings\": \"idle_timeout_firings\", \"watermark\": \"input_watermark_us\","
            + " \"event_time\": \"input_event_time_us\", \"tolerance_us\": 1000,"
            + " \"histogram\": {\"buckets\": \"hist:arrival_delay*lateness:buckets\","
            + " \"sums\": [\"hist:arrival_delay:sum_us\", \"hist:lateness:sum_us\"],"
            + " \"bounds\": [" + buckets.get("arrival_delay").get("bounds_us") + ", "
            + buckets.get("lateness").get("bounds_us") + "]},"
            + " \"queueing\": {\"buckets\": \"hist:queueing_delay:buckets\","
            + " \"sum\": \"hist:queueing_delay:sum_us\","
            + " \"bounds\": " + buckets.get("queueing_delay").get("bounds_us") + "},"
            + " \"spread\": null, \"kept\": null}";
    return Observation.of(JSON.readTree(spec), "wmobs_policy_observation");
  }

  /** One row's arguments: verdict, ts, event, idle, delay, lateness, queue (null: absent). */
  private static Observation.Arguments row(Long... values) {
    return new Observation.Arguments() {
      @Override
      public boolean isNull(int index) {
        return values[index] == null;
      }

      @Override
      public long get(int index) {
        return values[index];
      }
    };
  }

  private static Observation.Arguments random(Random rnd) {
    long[] verdicts = {0, 0, 0, 4, 32, 64};
    long idle = rnd.nextInt(10) == 0 ? rnd.nextInt(3) + 1 : -1;
    return row(
        verdicts[rnd.nextInt(verdicts.length)],
        rnd.nextBoolean() ? null : (long) rnd.nextInt(1_000_000_000),
        (long) rnd.nextInt(1_000_000_000),
        idle,
        rnd.nextInt(5) == 0 ? null : (long) (rnd.nextInt(2_000_000_000) - 1_000_000_000),
        rnd.nextInt(5) == 0 ? null : (long) rnd.nextInt(100_000_000),
        rnd.nextInt(5) == 0 ? null : (long) (rnd.nextInt(2_000_000_000) - 100_000_000));
  }

  @Test
  void mergedPartsCountAsTheWhole() throws Exception {
    Observation observation = observation();
    for (int seed = 0; seed < 50; seed++) {
      Random rnd = new Random(seed);
      Observation.State whole = observation.zero();
      Observation.State[] parts = {observation.zero(), observation.zero(), observation.zero()};
      for (int i = rnd.nextInt(200); i > 0; i--) {
        Observation.Arguments arguments = random(rnd);
        observation.reduce(whole, arguments);
        observation.reduce(parts[rnd.nextInt(parts.length)], arguments);
      }
      Observation.State merged = observation.zero();
      for (Observation.State part : parts) { // as the driver gets them: serialized
        observation.merge(merged, observation.deserialize(observation.serialize(part)));
      }
      assertEquals(observation.finish(whole), observation.finish(merged), "seed " + seed);
    }
  }

  @Test
  void aPartitionCountedAgainIsCountedOnce() throws Exception {
    // Spark before 4.3 hands the accumulator every successful attempt of a task: a stage run
    // again after a fetch failure, a speculative copy. The same partition's rows are the same.
    Observation observation = observation();
    Random rnd = new Random(7);
    Observation.State[] tasks = new Observation.State[3];
    Observation.State whole = observation.zero();
    for (int partition = 0; partition < tasks.length; partition++) {
      tasks[partition] = observation.zero();
      Observation.place(tasks[partition], partition * 100); // sparse partition ids
      for (int i = 0; i < 50; i++) {
        Observation.Arguments arguments = random(rnd);
        observation.reduce(tasks[partition], arguments);
        observation.reduce(whole, arguments);
      }
    }
    Observation.State merged = observation.zero();
    int[] arrivals = {0, 1, 0, 2, 1, 2, 2}; // attempts in the order the driver gets them
    for (int partition : arrivals) {
      Observation.State sent = observation.deserialize(observation.serialize(tasks[partition]));
      observation.merge(merged, sent);
    }
    assertEquals(observation.finish(whole), observation.finish(merged));
    // A merged state brings its partitions along: merged again, it adds nothing.
    observation.merge(merged, observation.deserialize(observation.serialize(merged)));
    assertEquals(observation.finish(whole), observation.finish(merged));
  }

  @Test
  void countsWithoutAPartitionAreAlwaysAdded() throws Exception {
    // Counted outside a task (no partition known): nothing to tell attempts apart by.
    Observation observation = observation();
    Observation.State one = observation.zero();
    observation.reduce(one, row(4L, 10L, 10L, -1L, null, null, null));
    Observation.State merged = observation.zero();
    observation.merge(merged, one);
    observation.merge(merged, observation.deserialize(observation.serialize(one)));
    assertEquals(2, JSON.readTree(observation.finish(merged)).get("rule:early_arrival:dropped").asLong());
  }

  @Test
  void countsWhatTheSpecNames() throws Exception {
    Observation observation = observation();
    Observation.State state = observation.zero();
    observation.reduce(state, row(4L, 100L, 100L, -1L, -400L, null, 50L)); // dropped early
    observation.reduce(state, row(32L, 5_000L, 3_000L, -1L, 2_000L, 2_000L, 7L)); // adjusted
    observation.reduce(state, row(0L, 9_000L, 0L, 2L, null, null, 99L)); // synthetic: 2 firings
    JsonNode columns = JSON.readTree(observation.finish(state));
    assertEquals(1, columns.get("rule:early_arrival:dropped").asLong());
    assertEquals(1, columns.get("rule:out_of_order:adjusted").asLong());
    assertEquals(1, columns.get("dead_letter_rows").asLong());
    assertEquals(2, columns.get("idle_timeout_firings").asLong());
    assertEquals(9_000 - 1_000, columns.get("input_watermark_us").asLong()); // synthetic moves it
    assertEquals(3_000, columns.get("input_event_time_us").asLong()); // real rows only
    assertEquals(-400 + 2_000, columns.get("hist:arrival_delay:sum_us").asLong());
    assertEquals(2_000, columns.get("hist:lateness:sum_us").asLong());
    assertEquals(50 + 7, columns.get("hist:queueing_delay:sum_us").asLong()); // real rows only
    assertEquals(2, columns.get("hist:queueing_delay:buckets").get(0).get("y").asLong());
  }

  /**
   * Rows stamped decades off (an epoch-0 producer, a year-old topic replayed) sum past a long's
   * range: the sums are doubles, the batch goes on.
   */
  @Test
  void sumsPastTheRangeOfALongDoNotFailTheBatch() throws Exception {
    Observation observation = observation();
    Observation.State[] parts = {observation.zero(), observation.zero()};
    long fiftyYears = 50L * 365 * 24 * 3600 * 1_000_000; // 1.6e15 µs
    int rows = 10_000; // 1.6e19 µs in all: above Long.MAX_VALUE
    for (int i = 0; i < rows; i++) {
      observation.reduce(parts[i % 2], row(0L, 1L, 1L, -1L, fiftyYears, fiftyYears, fiftyYears));
    }
    Observation.State merged = observation.zero();
    for (Observation.State part : parts) {
      observation.merge(merged, observation.deserialize(observation.serialize(part)));
    }
    JsonNode columns = JSON.readTree(observation.finish(merged));
    double expected = (double) fiftyYears * rows;
    for (String sum :
        new String[] {"arrival_delay", "lateness", "queueing_delay"}) {
      assertEquals(expected, columns.get("hist:" + sum + ":sum_us").asDouble(), expected * 1e-12);
    }
  }

  @Test
  void aSumIsNullWhereNoRowHadAValue() throws Exception {
    Observation observation = observation();
    Observation.State state = observation.zero();
    observation.reduce(state, row(0L, 1L, 1L, -1L, null, null, null));
    JsonNode columns = JSON.readTree(observation.finish(observation.deserialize(
        observation.serialize(state))));
    assertEquals(true, columns.get("hist:lateness:sum_us").isNull());
    assertEquals(true, columns.get("hist:queueing_delay:sum_us").isNull());
  }

  @Test
  void theSpreadOfSubstreamsIsTheFastestMinusTheSlowestOverPartitions() throws Exception {
    String spec =
        "{\"counts\": [], \"dropped_bits\": 85, \"watermark\": \"w\", \"event_time\": \"e\","
            + " \"tolerance_us\": 0, \"spread\": \"substream_spread_us\", \"dead_letters\": null,"
            + " \"firings\": null, \"histogram\": null, \"queueing\": null, \"kept\": null}";
    Observation observation = Observation.of(JSON.readTree(spec), "wmobs_policy_observation");
    assertEquals(6, observation.arity()); // verdict, ts, event, idle, slowest, fastest
    Observation.State[] parts = {observation.zero(), observation.zero()};
    observation.reduce(parts[0], row(0L, 5L, 5L, -1L, 300L, 700L)); // a partition's first row
    observation.reduce(parts[0], row(0L, 6L, 6L, -1L, null, null)); // the rest: null
    observation.reduce(parts[1], row(0L, 7L, 7L, -1L, 100L, 400L));
    Observation.State merged = observation.zero();
    for (Observation.State part : parts) {
      observation.merge(merged, observation.deserialize(observation.serialize(part)));
    }
    assertEquals(700 - 100, JSON.readTree(observation.finish(merged))
        .get("substream_spread_us").asLong());
    Observation.State none = observation.zero();
    observation.reduce(none, row(0L, 5L, 5L, -1L, null, null));
    assertEquals(true, JSON.readTree(observation.finish(none)).get("substream_spread_us").isNull());
  }
}
