package io.wmobs.spark;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/** Which Spark lines plan substreams' {@code transformWithState} in a real-time batch. */
class RealTimeModeTest {
  @Test
  void transformWithStateRunsInRealTimeBatchesFromSpark43() {
    for (String version : new String[] {"4.1.0", "4.1.2", "4.2.0", "4.2.1-SNAPSHOT", "3.5.9"}) {
      assertFalse(RealTimeMode.keyedStateRuns(version), version);
    }
    for (String version : new String[] {"4.3.0", "4.3.1-SNAPSHOT", "4.10.0", "5.0.0", "5"}) {
      assertTrue(RealTimeMode.keyedStateRuns(version), version);
    }
  }
}
