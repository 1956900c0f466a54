package io.wmobs.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.spark.sql.Encoder;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.expressions.Aggregator;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * Everything a time policy observes per micro-batch, as one aggregate function for {@code
 * observe}: the verdict counts, the dead letters, the idle-timeout firings, the input's
 * watermark and largest event time, and the two distributions. Its result is a JSON object
 * whose members are the columns that {@code wmobs/policy/_plan.py} otherwise observes one
 * aggregate each, with the same names and values; the listener reads either. (Text, because
 * Spark's encoder of a struct result cost a few ms more per micro-batch.)
 *
 * <p>Spark evaluates every aggregate of {@code observe} row by row outside the stage's
 * generated code (~20 ns per row and aggregate), and plans each of them again in every
 * micro-batch; one aggregate does it once. Its arguments, one row each: the verdict bits, the
 * system timestamp (µs), the event time (µs), the idle-timeout column ({@code -1} for a real
 * row, a positive number of firings for a synthetic one), and, with the distributions, the
 * arrival delay and the lateness (µs).
 *
 * <p>What is counted, as the columns it replaces ({@code spec}: JSON, see {@link #register}):
 *
 * <ul>
 *   <li>{@code counts}: per {@code [column, bit]}, the rows whose verdict has the bit; {@code
 *       dead_letters}: the rows with a dropped bit (0 without rows);
 *   <li>{@code firings}: the sum of the positive idle values (null without rows);
 *   <li>{@code watermark}: the largest system timestamp of the rows not dropped, minus {@code
 *       tolerance_us}; {@code event_time}: the largest event time of those that are real (null
 *       without any);
 *   <li>{@code histogram}: for the real rows, the joint buckets of delay and lateness, as {@code
 *       histogram_numeric}'s points of the joint index: a value's bucket is the number of bounds
 *       below it (the last bucket is above every bound), a null's its histogram's bucket count,
 *       the index {@code delayBucket * (latenessBuckets + 1) + latenessBucket}, rows without
 *       either value not counted; and each one's sum (null without values).
 * </ul>
 */
public final class PolicyObservation extends Aggregator<Row, PolicyObservation.State, String> {
  private static final long serialVersionUID = 1L;
  private static final ObjectMapper JSON = new ObjectMapper();

  private final String[] countColumns;
  private final long[] countBits;
  private final long droppedBits;
  private final String deadLetterColumn;
  private final String firingsColumn;
  private final String watermarkColumn;
  private final String eventTimeColumn;
  private final long toleranceUs;
  private final String bucketsColumn;
  private final String[] sumColumns;
  private final long[] first;
  private final long[] second;
  private final StructType input;

  private PolicyObservation(JsonNode spec) {
    JsonNode counts = spec.get("counts");
    countColumns = new String[counts.size()];
    countBits = new long[counts.size()];
    for (int i = 0; i < counts.size(); i++) {
      countColumns[i] = counts.get(i).get(0).asText();
      countBits[i] = counts.get(i).get(1).asLong();
    }
    droppedBits = spec.get("dropped_bits").asLong();
    deadLetterColumn = text(spec, "dead_letters");
    firingsColumn = text(spec, "firings");
    watermarkColumn = spec.get("watermark").asText();
    eventTimeColumn = spec.get("event_time").asText();
    toleranceUs = spec.get("tolerance_us").asLong();
    JsonNode histogram = spec.get("histogram");
    boolean distributions = histogram != null && !histogram.isNull();
    bucketsColumn = distributions ? histogram.get("buckets").asText() : null;
    sumColumns =
        distributions
            ? new String[] {histogram.get("sums").get(0).asText(), histogram.get("sums").get(1).asText()}
            : new String[0];
    first = distributions ? bounds(histogram.get("bounds").get(0)) : new long[0];
    second = distributions ? bounds(histogram.get("bounds").get(1)) : new long[0];

    List<StructField> in = new ArrayList<>();
    for (String name : new String[] {"verdict", "ts", "event", "idle", "delay", "lateness"}) {
      if (distributions || !(name.equals("delay") || name.equals("lateness"))) {
        in.add(DataTypes.createStructField(name, DataTypes.LongType, true));
      }
    }
    input = DataTypes.createStructType(in);
  }

  private static String text(JsonNode spec, String field) {
    JsonNode node = spec.get(field);
    return node == null || node.isNull() ? null : node.asText();
  }

  private static long[] bounds(JsonNode values) {
    long[] parsed = new long[values.size()];
    for (int i = 0; i < parsed.length; i++) {
      parsed[i] = values.get(i).asLong();
      if (i > 0 && parsed[i] <= parsed[i - 1]) {
        throw new IllegalArgumentException("wmobs: bounds must ascend: " + values);
      }
    }
    return parsed;
  }

  /**
   * Registers the function as {@code name} in {@code spark}. {@code spec}: a JSON object with
   * {@code counts} ({@code [[column, bit], ...]}), {@code dropped_bits}, {@code dead_letters}
   * and {@code firings} (a column name or null), {@code watermark} and {@code event_time}
   * (column names), {@code tolerance_us}, and {@code histogram} (null, or {@code buckets} and
   * {@code sums}: column names, {@code bounds}: two ascending lists of µs).
   */
  public static void register(SparkSession spark, String name, String spec) throws Exception {
    PolicyObservation observation = new PolicyObservation(JSON.readTree(spec));
    spark.udf().register(name, functions.udaf(observation, Encoders.row(observation.input)));
  }

  /** What one task has counted. */
  public static final class State implements Serializable {
    private static final long serialVersionUID = 1L;
    long rows;
    long[] counts;
    long deadLetters;
    long firings;
    // The rest: null until a value is seen.
    Long maxTs;
    Long maxEvent;
    long[] buckets;
    Long[] sums = new Long[2];
  }

  @Override
  public State zero() {
    State state = new State();
    state.counts = new long[countBits.length];
    state.buckets = new long[bucketsColumn == null ? 0 : (first.length + 2) * (second.length + 2)];
    return state;
  }

  private static Long value(Row row, int index) {
    return row.isNullAt(index) ? null : row.getLong(index);
  }

  /** The bucket of {@code value} among {@code bounds}, or their bucket count for null. */
  private static int digit(long[] bounds, Long value) {
    if (value == null) {
      return bounds.length + 1;
    }
    int found = Arrays.binarySearch(bounds, value);
    return found >= 0 ? found : -found - 1;
  }

  @Override
  public State reduce(State state, Row row) {
    state.rows += 1;
    Long idle = value(row, 3);
    boolean real = idle != null && idle == -1L;  // the column's value for a real row
    if (idle != null && idle > 0) {
      state.firings += idle;
    }
    if (!row.isNullAt(0)) {
      long verdict = row.getLong(0);
      for (int i = 0; i < countBits.length; i++) {
        if ((verdict & countBits[i]) != 0) {
          state.counts[i] += 1;
        }
      }
      if ((verdict & droppedBits) != 0) {
        state.deadLetters += 1;
      } else {
        state.maxTs = max(state.maxTs, value(row, 1));
        state.maxEvent = real ? max(state.maxEvent, value(row, 2)) : state.maxEvent;
      }
    }
    if (bucketsColumn != null && real) {
      Long delay = value(row, 4);
      Long lateness = value(row, 5);
      if (delay != null || lateness != null) {
        state.buckets[digit(first, delay) * (second.length + 2) + digit(second, lateness)] += 1;
      }
      state.sums[0] = plus(state.sums[0], delay);
      state.sums[1] = plus(state.sums[1], lateness);
    }
    return state;
  }

  /** The larger of two values, either of which may be missing (null). */
  private static Long max(Long a, Long b) {
    return a == null ? b : b == null ? a : Long.valueOf(Math.max(a, b));
  }

  /** The sum of two values, either of which may be missing (null); overflow fails the task. */
  private static Long plus(Long a, Long b) {
    return a == null ? b : b == null ? a : Long.valueOf(Math.addExact(a, b));
  }

  @Override
  public State merge(State a, State b) {
    a.rows += b.rows;
    for (int i = 0; i < a.counts.length; i++) {
      a.counts[i] += b.counts[i];
    }
    a.deadLetters += b.deadLetters;
    a.firings += b.firings;
    a.maxTs = max(a.maxTs, b.maxTs);
    a.maxEvent = max(a.maxEvent, b.maxEvent);
    for (int i = 0; i < a.buckets.length; i++) {
      a.buckets[i] += b.buckets[i];
    }
    for (int i = 0; i < 2; i++) {
      a.sums[i] = plus(a.sums[i], b.sums[i]);
    }
    return a;
  }

  @Override
  public String finish(State state) {
    ObjectNode columns = JSON.createObjectNode();
    for (int i = 0; i < countColumns.length; i++) {
      columns.put(countColumns[i], state.counts[i]);
    }
    if (deadLetterColumn != null) {
      columns.put(deadLetterColumn, state.deadLetters);
    }
    if (firingsColumn != null) {
      columns.put(firingsColumn, state.rows == 0 ? null : state.firings);
    }
    columns.put(watermarkColumn, state.maxTs == null ? null : state.maxTs - toleranceUs);
    columns.put(eventTimeColumn, state.maxEvent);
    if (bucketsColumn != null) {
      ArrayNode points = columns.putArray(bucketsColumn);
      for (int i = 0; i < state.buckets.length; i++) {
        if (state.buckets[i] != 0) {
          points.addObject().put("x", i).put("y", state.buckets[i]);
        }
      }
      for (int i = 0; i < 2; i++) {
        columns.put(sumColumns[i], state.sums[i]);
      }
    }
    return columns.toString();
  }

  @Override
  public Encoder<State> bufferEncoder() {
    return Encoders.javaSerialization(State.class);
  }

  @Override
  public Encoder<String> outputEncoder() {
    return Encoders.STRING();
  }
}
