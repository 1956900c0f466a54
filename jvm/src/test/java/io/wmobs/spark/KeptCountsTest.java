package io.wmobs.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.ByteArrayInputStream;
import java.io.DataInputStream;
import org.junit.jupiter.api.Test;

/**
 * Kept counts: the query runs whose first micro-batch the driver has seen (remembered, and
 * bounded), and what a kept file says of the counts in it.
 */
class KeptCountsTest {
  @Test
  void aKeptFileNamesItsBatchFormatAndLayoutBeforeItsCounts() throws Exception {
    Observation observation = ObservationTest.observation();
    Observation.State state = observation.zero();
    byte[] file = KeptCounts.framed(42, observation, state);
    DataInputStream in = new DataInputStream(new ByteArrayInputStream(file));
    assertEquals(42, in.readLong());
    assertEquals(KeptCounts.FORMAT, in.readInt());
    assertEquals(observation.layout(), in.readLong());
    assertEquals(observation.serialize(state).length, in.available());
    // The same spec parsed again has the same layout; a policy that counts otherwise has not.
    assertEquals(observation.layout(), ObservationTest.observation().layout());
    String other =
        "{\"counts\": [[\"rule:late_arrival:adjusted\", 8]], \"dropped_bits\": 85,"
            + " \"watermark\": \"w\", \"event_time\": \"e\", \"tolerance_us\": 0,"
            + " \"spread\": null, \"dead_letters\": null, \"firings\": null,"
            + " \"histogram\": null, \"queueing\": null, \"kept\": null}";
    Observation changed =
        Observation.of(new ObjectMapper().readTree(other), "wmobs_policy_observation");
    assertNotEquals(observation.layout(), changed.layout());
  }

  @Test
  void aRunIsFirstOnceAndTheOldestIsForgottenPastTheBound() {
    String prefix = "kept-counts-test-" + System.nanoTime() + "-";
    assertTrue(KeptCounts.first(prefix + 0));
    assertFalse(KeptCounts.first(prefix + 0));
    for (int run = 1; run <= KeptCounts.REMEMBERED; run++) {
      assertTrue(KeptCounts.first(prefix + run));
    }
    assertFalse(KeptCounts.first(prefix + KeptCounts.REMEMBERED)); // the newest, remembered
    assertTrue(KeptCounts.first(prefix + 0)); // the oldest, forgotten
  }
}
