package io.wmobs.spark;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.util.Map;
import java.util.TreeMap;
import java.util.function.UnaryOperator;
import org.junit.jupiter.api.Test;

/**
 * A micro-batch told to a plan's functions: its tasks read its watermark, time and checkpoint
 * from what the planning thread had, not from their own local properties (a task of a {@code
 * foreachBatch} function's job over Spark Connect has none).
 */
class MicroBatchTest {
  private static MicroBatch planned(String batch, String toldBatch, String watermark) {
    Map<String, String> properties = new TreeMap<>();
    properties.put(MicroBatch.QUERY_ID, "q1");
    properties.put(MicroBatch.BATCH_ID, batch);
    properties.put(QueryCheckpoint.BATCH, toldBatch);
    properties.put(QueryCheckpoint.BATCH_QUERY, "q1");
    properties.put(QueryCheckpoint.WATERMARK, watermark);
    properties.put(QueryCheckpoint.TIMESTAMP, "2000");
    properties.put(QueryCheckpoint.ROOT, "s3a://bucket/ckpt/");
    properties.put(QueryCheckpoint.QUERY, "q1");
    return new MicroBatch(properties);
  }

  @Test
  void aToldMicroBatchIsReadWithoutTheTask() {
    UnaryOperator<String> property = MicroBatch.of(planned("7", "7", "1000"), null);
    assertEquals("7", property.apply(MicroBatch.BATCH_ID));
    assertArrayEquals(new long[] {1000, 2000}, BatchTimes.toldByRule(property, "7", "q1"));
    // The checkpoint of the query it was planned in, without a configured one.
    assertEquals("s3a://bucket/ckpt", new Hadoop.Checkpoint("", "").in(property));
    assertEquals("s3a://other", new Hadoop.Checkpoint("s3a://other", "").in(property));
  }

  @Test
  void noWatermarkYetAndTimesOfAnotherBatch() {
    UnaryOperator<String> before = MicroBatch.of(planned("0", "0", ""), null);
    assertArrayEquals(
        new long[] {Long.MIN_VALUE, 2000}, BatchTimes.toldByRule(before, "0", "q1"));
    // Times the rule told for another micro-batch (or query) are not this one's: the offsets
    // log is read instead.
    UnaryOperator<String> stale = MicroBatch.of(planned("8", "7", "1000"), null);
    assertNull(BatchTimes.toldByRule(stale, "8", "q1"));
    assertNull(BatchTimes.toldByRule(stale, "7", "q2"));
  }

  @Test
  void equalMicroBatchesAreEqual() {
    // The rule runs to a fixed point: a function told the same micro-batch again is unchanged.
    assertEquals(planned("3", "3", "5"), planned("3", "3", "5"));
  }
}
