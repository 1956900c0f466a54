package io.wmobs.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.Serializable;
import java.util.Arrays;
import java.util.BitSet;
import java.util.List;
import java.util.Set;

/**
 * Everything a time policy observes in one micro-batch, counted without Spark: the verdict
 * counts, the dead letters, the idle-timeout firings, the input's watermark and largest event
 * time, and the two distributions. {@link ObservationAggregate} is the aggregate function
 * ({@code wmobs_policy_observation}) that {@code observe} evaluates over these counts. The
 * result is a JSON object whose members are the columns that the Python engine observes one
 * Spark aggregate each ({@code wmobs/policy/_python/_observe.py}), with the same names and
 * values; the listener reads either. (Text, because a struct result's encoder cost a few ms
 * more per micro-batch.)
 *
 * <p>The arguments of each row: the verdict bits, the system timestamp (µs), the event time
 * (µs), the idle-timeout column ({@code -1} for a real row, a positive number of firings for a
 * synthetic one), with the distributions the arrival delay and the lateness (µs), and with
 * {@code queueing} the queueing delay (µs), with {@code spread} a substream partition's slowest
 * and fastest key's largest system timestamp (µs; null but on one row a partition). What
 * is counted, as the columns it replaces ({@code spec}: see {@link #of}):
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
 *       either value not counted; and each one's sum (null without values);
 *   <li>{@code spread}: the largest fastest minus the smallest slowest (null without any).
 * </ul>
 *
 * <p>Each task's counts carry the partition it counted ({@link #place}), and a merge takes a
 * partition's counts once: where Spark runs a stage's tasks again (an executor lost with its
 * shuffle output, a fetch failure, a speculative copy), before Spark 4.3 the accumulator behind
 * {@code observe} is handed every successful attempt's counts, and each verdict was counted
 * twice. A micro-batch's partition holds the same rows in every attempt (the same offsets),
 * so the first counts are the counts.
 */
public final class Observation implements Serializable {
  private static final long serialVersionUID = 3L;
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
  /** The queueing delay's histogram (null: not counted), its sum, and its bounds. */
  private final String queueColumn;
  private final String queueSumColumn;
  private final long[] queueBounds;
  /** Where the queueing delay is among the arguments (-1: not counted). */
  private final int queueArgument;
  /** Where each task's counts are kept until Spark commits (null: not kept), and below it. */
  private final String keptCheckpoint;
  private final String keptDirectory;
  /** Substreams' spread between keys (null: not observed), and where its two arguments are. */
  private final String spreadColumn;
  private final int spreadArgument;
  /**
   * How many arguments the function takes: 4, 2 more with the distributions, 1 with queueing,
   * 2 with the spread.
   */
  private final int arity;
  /** The name it is registered under, shown in plans. */
  private final String name;

  /** A spec's members (wmobs/policy/_jvm/_specs.py's {@code ObservationSpec}), and theirs. */
  static final Set<String> MEMBERS =
      Set.of(
          "counts", "dropped_bits", "dead_letters", "firings", "watermark", "event_time",
          "tolerance_us", "histogram", "queueing", "spread", "kept");

  static final Set<String> HISTOGRAM = Set.of("buckets", "sums", "bounds");
  static final Set<String> QUEUEING = Set.of("buckets", "sum", "bounds");
  static final Set<String> KEPT = Set.of("checkpoint", "directory");

  Observation(JsonNode spec, String name) {
    this.name = name;
    Spec.members(name, spec, MEMBERS, Set.of());
    Spec.Reader read = new Spec.Reader(name, spec);
    List<JsonNode> counts = read.tuples("counts", "si");
    countColumns = new String[counts.size()];
    countBits = new long[counts.size()];
    for (int i = 0; i < counts.size(); i++) {
      countColumns[i] = counts.get(i).get(0).textValue();
      countBits[i] = counts.get(i).get(1).longValue();
    }
    droppedBits = read.integer("dropped_bits");
    deadLetterColumn = read.textOrNull("dead_letters");
    firingsColumn = read.textOrNull("firings");
    watermarkColumn = read.text("watermark");
    eventTimeColumn = read.text("event_time");
    toleranceUs = read.integer("tolerance_us");
    Spec.Reader histogram = read.objectOrNull("histogram", HISTOGRAM);
    boolean distributions = histogram != null;
    bucketsColumn = distributions ? histogram.text("buckets") : null;
    sumColumns = distributions ? pair("sums", histogram.texts("sums")) : new String[0];
    List<long[]> bounds = distributions ? histogram.integerLists("bounds") : List.of();
    if (distributions && bounds.size() != 2) {
      throw new IllegalArgumentException("wmobs: " + name + "'s histogram has two bounds' lists");
    }
    first = distributions ? ascending(bounds.get(0)) : new long[0];
    second = distributions ? ascending(bounds.get(1)) : new long[0];
    Spec.Reader queueing = read.objectOrNull("queueing", QUEUEING);
    boolean queued = queueing != null;
    queueColumn = queued ? queueing.text("buckets") : null;
    queueSumColumn = queued ? queueing.text("sum") : null;
    queueBounds = queued ? ascending(queueing.integers("bounds")) : new long[0];
    queueArgument = queued ? (distributions ? 6 : 4) : -1;
    Spec.Reader kept = read.objectOrNull("kept", KEPT);
    keptCheckpoint = kept == null ? null : kept.text("checkpoint");
    keptDirectory = kept == null ? null : kept.text("directory");
    spreadColumn = read.textOrNull("spread");
    int before = 4 + (distributions ? 2 : 0) + (queued ? 1 : 0);
    spreadArgument = spreadColumn == null ? -1 : before;
    arity = before + (spreadColumn == null ? 0 : 2);
  }

  @Override
  public String toString() {
    return name;
  }

  private String[] pair(String member, List<String> values) {
    if (values.size() != 2) {
      throw new IllegalArgumentException("wmobs: " + name + "'s histogram has two " + member);
    }
    return values.toArray(new String[0]);
  }

  private static long[] ascending(long[] bounds) {
    for (int i = 1; i < bounds.length; i++) {
      if (bounds[i] <= bounds[i - 1]) {
        throw new IllegalArgumentException("wmobs: bounds must ascend: " + Arrays.toString(bounds));
      }
    }
    return bounds;
  }

  /** The query's checkpoint where each task's counts are kept (null: not kept, see KeptCounts). */
  String keptCheckpoint() {
    return keptCheckpoint;
  }

  String keptDirectory() {
    return keptDirectory;
  }

  /**
   * {@code spec}: a JSON object with {@code counts} ({@code [[column, bit], ...]}), {@code
   * dropped_bits}, {@code dead_letters} and {@code firings} (a column name or null), {@code
   * watermark} and {@code event_time} (column names), {@code tolerance_us}, and {@code
   * histogram} (null, or {@code buckets} and {@code sums}: column names, {@code bounds}: two
   * ascending lists of µs), and {@code queueing} (null, or {@code buckets} and {@code sum}:
   * column names, {@code bounds}: ascending µs), and {@code spread} (null, or a column name:
   * then two more arguments, the slowest and the fastest key's largest timestamp of a
   * partition of substreams, whose spread over the batch it gives).
   */
  static Observation of(JsonNode spec, String name) {
    return new Observation(spec, name);
  }

  /** How many arguments the function takes after its spec (see {@link #arity}). */
  int arity() {
    return arity;
  }

  /** What one task has counted. */
  public static final class State {
    long rows;
    long[] counts;
    long deadLetters;
    long firings;
    // The rest: absent (null) until a value is seen, each with its flag.
    long maxTs;
    boolean hasTs;
    long maxEvent;
    boolean hasEvent;
    long[] buckets;
    /**
     * Delay, lateness, queueing: sums of µs, as doubles. A long overflows where a batch holds
     * rows stamped decades off (an epoch-0 producer, a replayed topic: 300,000 rows a year late
     * pass 2^63 µs), which must not fail the query; a double is exact to 2^53 µs (285 years)
     * and Prometheus' {@code _sum} is a float anyway.
     */
    double[] sums = new double[3];
    /** Whether each sum has a value (else it is null: no row had one). */
    boolean[] summed = new boolean[3];
    /** Substreams: the smallest and the largest of the keys' largest timestamps. */
    long slowest;
    long fastest;
    boolean spread;
    long[] queue;
    /** The bucket each histogram found last: rows of a batch tend to fall in the same one. */
    int[] last = new int[3];
    /** The partitions counted (a task's: its one; merged: theirs); empty: not known. */
    BitSet partitions = new BitSet();
    /** Whether a task's counts have been placed in their partition yet. */
    boolean placed;
  }

  /** Counts from here on are partition {@code partition}'s (a task's, before its rows). */
  static void place(State state, int partition) {
    state.partitions.set(partition);
    state.placed = true;
  }

  State zero() {
    State state = new State();
    state.counts = new long[countBits.length];
    state.buckets = new long[bucketsColumn == null ? 0 : (first.length + 2) * (second.length + 2)];
    state.queue = new long[queueColumn == null ? 0 : queueBounds.length + 1];
    return state;
  }

  /**
   * The bucket of {@code value} among {@code bounds}: the number of bounds below it. {@code
   * last}: the bucket found for the previous value, checked first. (Comparing every bound
   * without branches measured slower than the binary search: 11.6 ns against 8.6 ns a value
   * over the lateness bounds.)
   */
  static int digit(long[] bounds, long value, int last) {
    if ((last == 0 || bounds[last - 1] < value) && (last == bounds.length || value <= bounds[last])) {
      return last;
    }
    int found = Arrays.binarySearch(bounds, value);
    return found >= 0 ? found : -found - 1;
  }

  /** One row's arguments (see the class comment); a null value is not read. */
  public interface Arguments {
    boolean isNull(int index);

    long get(int index);
  }

  /** Counts one row. */
  void reduce(State state, Arguments row) {
    state.rows += 1;
    boolean idleKnown = !row.isNull(3);
    long idle = idleKnown ? row.get(3) : 0;
    boolean real = idleKnown && idle == -1L;  // the column's value for a real row
    if (idle > 0) {
      state.firings += idle;
    }
    if (!row.isNull(0)) {
      long bits = row.get(0);
      for (int i = 0; i < countBits.length; i++) {
        if ((bits & countBits[i]) != 0) {
          state.counts[i] += 1;
        }
      }
      if ((bits & droppedBits) != 0) {
        state.deadLetters += 1;
      } else {
        if (!row.isNull(1)) {
          long ts = row.get(1);
          raiseTs(state, ts); // primitives: a Long per row cost 8 %
        }
        if (real && !row.isNull(2)) {
          long event = row.get(2);
          raiseEvent(state, event);
        }
      }
    }
    if (bucketsColumn != null && real) {
      boolean hasDelay = !row.isNull(4);
      boolean hasLateness = !row.isNull(5);
      long delay = hasDelay ? row.get(4) : 0;
      long lateness = hasLateness ? row.get(5) : 0;
      if (hasDelay || hasLateness) {
        int a = hasDelay ? (state.last[0] = digit(first, delay, state.last[0])) : first.length + 1;
        int b =
            hasLateness ? (state.last[1] = digit(second, lateness, state.last[1])) : second.length + 1;
        state.buckets[a * (second.length + 2) + b] += 1;
      }
      if (hasDelay) {
        state.sums[0] += delay;
        state.summed[0] = true;
      }
      if (hasLateness) {
        state.sums[1] += lateness;
        state.summed[1] = true;
      }
    }
    if (queueColumn != null && real && !row.isNull(queueArgument)) {
      long queued = row.get(queueArgument);
      state.queue[state.last[2] = digit(queueBounds, queued, state.last[2])] += 1;
      state.sums[2] += queued;
      state.summed[2] = true;
    }
    if (spreadArgument >= 0 && !row.isNull(spreadArgument) && !row.isNull(spreadArgument + 1)) {
      widen(state, row.get(spreadArgument), row.get(spreadArgument + 1));
    }
  }

  private static void raiseTs(State state, long ts) {
    if (!state.hasTs || ts > state.maxTs) {
      state.maxTs = ts;
      state.hasTs = true;
    }
  }

  private static void raiseEvent(State state, long event) {
    if (!state.hasEvent || event > state.maxEvent) {
      state.maxEvent = event;
      state.hasEvent = true;
    }
  }

  /** The spread of {@code state} widened to take in {@code slow} and {@code fast}. */
  private static void widen(State state, long slow, long fast) {
    state.slowest = state.spread ? Math.min(state.slowest, slow) : slow;
    state.fastest = state.spread ? Math.max(state.fastest, fast) : fast;
    state.spread = true;
  }

  /**
   * {@code b} added to {@code a}, unless every partition {@code b} counted is in {@code a}
   * already. (Spark merges one task's counts at a time into the driver's: a {@code b} of several
   * partitions, some of them counted, cannot be taken apart and is added whole.)
   */
  State merge(State a, State b) {
    if (!b.partitions.isEmpty()) {
      BitSet unseen = (BitSet) b.partitions.clone();
      unseen.andNot(a.partitions);
      if (unseen.isEmpty()) {
        return a; // another attempt of a partition already counted
      }
      a.partitions.or(b.partitions);
    }
    a.rows += b.rows;
    for (int i = 0; i < a.counts.length; i++) {
      a.counts[i] += b.counts[i];
    }
    a.deadLetters += b.deadLetters;
    a.firings += b.firings;
    if (b.hasTs) {
      raiseTs(a, b.maxTs);
    }
    if (b.hasEvent) {
      raiseEvent(a, b.maxEvent);
    }
    for (int i = 0; i < a.buckets.length; i++) {
      a.buckets[i] += b.buckets[i];
    }
    for (int i = 0; i < a.queue.length; i++) {
      a.queue[i] += b.queue[i];
    }
    for (int i = 0; i < a.sums.length; i++) {
      a.sums[i] += b.sums[i];
      a.summed[i] |= b.summed[i];
    }
    if (b.spread) {
      widen(a, b.slowest, b.fastest);
    }
    return a;
  }

  /** One of {@code state}'s sums; null where no row had a value. */
  private static Double sum(State state, int index) {
    return state.summed[index] ? Double.valueOf(state.sums[index]) : null;
  }

  String finish(State state) {
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
    columns.put(watermarkColumn, state.hasTs ? Long.valueOf(state.maxTs - toleranceUs) : null);
    columns.put(eventTimeColumn, state.hasEvent ? Long.valueOf(state.maxEvent) : null);
    if (bucketsColumn != null) {
      ArrayNode points = columns.putArray(bucketsColumn);
      for (int i = 0; i < state.buckets.length; i++) {
        if (state.buckets[i] != 0) {
          points.addObject().put("x", i).put("y", state.buckets[i]);
        }
      }
      for (int i = 0; i < 2; i++) {
        columns.put(sumColumns[i], sum(state, i));
      }
    }
    if (queueColumn != null) {
      ArrayNode points = columns.putArray(queueColumn);
      for (int i = 0; i < state.queue.length; i++) {
        if (state.queue[i] != 0) {
          points.addObject().put("x", i).put("y", state.queue[i]);
        }
      }
      columns.put(queueSumColumn, sum(state, 2));
    }
    if (spreadColumn != null) {
      columns.put(spreadColumn, state.spread ? Long.valueOf(state.fastest - state.slowest) : null);
    }
    return columns.toString();
  }

  /**
   * What the bytes of a state mean ({@link #serialize}): a fingerprint of the counts' columns,
   * the bounds and what is observed, which a spec that counts otherwise does not share.
   */
  long layout() {
    String layout =
        String.join(",", countColumns) + Arrays.toString(countBits) + bucketsColumn
            + Arrays.toString(first) + Arrays.toString(second) + sumColumns.length + queueColumn
            + Arrays.toString(queueBounds) + (spreadColumn != null);
    return java.util.UUID.nameUUIDFromBytes(
            layout.getBytes(java.nio.charset.StandardCharsets.UTF_8))
        .getMostSignificantBits();
  }

  /** A task's state as bytes, for the driver to merge ({@link ObservationBytes}). */
  byte[] serialize(State state) {
    return ObservationBytes.write(state);
  }

  State deserialize(byte[] stored) {
    State state = zero();
    ObservationBytes.read(stored, state);
    return state;
  }
}
