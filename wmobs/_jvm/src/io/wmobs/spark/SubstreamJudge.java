package io.wmobs.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.Serializable;
import java.nio.channels.Channels;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamReader;
import org.apache.arrow.vector.ipc.ArrowStreamWriter;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.function.MapPartitionsFunction;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.util.SerializableConfiguration;

/**
 * Substreams in the JVM: the per-key out-of-order judge over one partition of rows shuffled by
 * key bucket, with its state in the query's checkpoint. The same rules, state files and output
 * as the Python stage ({@code wmobs/policy/_substream_stage.py}, {@code _substream_judge.py},
 * {@code _substream_state.py}), which stays the fallback where the JAR is not loaded; a query
 * can restart on either.
 *
 * <p>Per key, in arrival order (ties keep input order): the key's watermark is the largest
 * system timestamp of its earlier candidate rows (and of its state) minus the tolerance; a
 * candidate row below it is out of order, adjusted up to it or dropped. State per key: the
 * largest system timestamp, when it was last seen and up to when its idle clock has run, one
 * Arrow IPC file per key bucket and micro-batch ({@code <root>/<bucket>/<batchId>.arrow}),
 * written whole at once; batch N reads the newest version before N, so a retried batch reads
 * the same state again.
 */
public final class SubstreamJudge implements MapPartitionsFunction<Row, Row>, Serializable {
  private static final long serialVersionUID = 1L;
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final long NONE = Long.MIN_VALUE;
  private static final long HEARTBEAT = -2;
  private static final long STALE_MS = 3_600_000L;
  private static final String[] STATE_COLUMNS = {"key", "max_us", "seen_ms", "advanced_ms"};
  private static final BufferAllocator ARROW = new RootAllocator(Long.MAX_VALUE);

  private final String checkpoint;
  private final String directory;
  private final int buckets;
  private final long toleranceUs;
  private final boolean drop;
  private final long ttlMs; // -1: none
  private final long idleTimeoutMs; // -1: none
  private final long candidateBits;
  private final long oooBit;
  private final int key;
  private final int ts;
  private final int arrival;
  private final int verdict;
  private final int idle; // -1: none
  private final int lateness;
  private final int[] output;
  private final boolean passThrough;
  private final Broadcast<SerializableConfiguration> conf;

  private SubstreamJudge(JsonNode spec, Broadcast<SerializableConfiguration> conf) {
    checkpoint = spec.get("checkpoint").asText();
    directory = spec.get("directory").asText();
    buckets = spec.get("buckets").asInt();
    toleranceUs = spec.get("tolerance_us").asLong();
    drop = spec.get("drop").asBoolean();
    ttlMs = spec.path("ttl_ms").asLong(-1);
    idleTimeoutMs = spec.path("idle_timeout_ms").asLong(-1);
    candidateBits = spec.get("candidate_bits").asLong();
    oooBit = spec.get("ooo_bit").asLong();
    key = spec.get("key").asInt();
    ts = spec.get("ts").asInt();
    arrival = spec.get("arrival").asInt();
    verdict = spec.get("verdict").asInt();
    idle = spec.path("idle").asInt(-1);
    lateness = spec.get("lateness").asInt();
    JsonNode columns = spec.get("output");
    output = new int[columns.size()];
    for (int i = 0; i < output.length; i++) {
      output[i] = columns.get(i).asInt();
    }
    passThrough = spec.path("pass_through").asBoolean(false);
    this.conf = conf;
  }

  /**
   * The function for {@code Dataset.mapPartitions}. {@code spec}: JSON with {@code checkpoint}
   * ("" for a named query's), {@code directory} (the state's, below the checkpoint), {@code
   * buckets}, {@code tolerance_us}, {@code drop}, {@code ttl_ms} and {@code idle_timeout_ms}
   * (null: none), {@code candidate_bits} (verdict bits of rows no longer in play), {@code
   * ooo_bit}, the input positions of {@code key}, {@code ts}, {@code arrival}, {@code verdict},
   * {@code idle} (null: no idle timeout) and {@code lateness}, and {@code output}: the input
   * positions of the columns to yield. ({@code pass_through}: yield every row as it is, judge
   * nothing; a diagnostic of the benchmarks, to measure what the judge costs.)
   */
  public static MapPartitionsFunction<Row, Row> create(SparkSession spark, String spec)
      throws IOException {
    Configuration hadoop = spark.sessionState().newHadoopConf();
    return new SubstreamJudge(
        JSON.readTree(spec), SerializableConfiguration.broadcast(spark.sparkContext(), hadoop));
  }

  @Override
  public Iterator<Row> call(Iterator<Row> input) throws Exception {
    if (passThrough) {
      return new Iterator<Row>() {
        @Override
        public boolean hasNext() {
          return input.hasNext();
        }

        @Override
        public Row next() {
          return select(values(input.next()));
        }
      };
    }
    List<Row> rows = new ArrayList<>();
    input.forEachRemaining(rows::add);
    if (rows.isEmpty()) {
      return Collections.emptyIterator();
    }
    long nowMs = System.currentTimeMillis();
    int n = rows.size();
    boolean[] beat = new boolean[n];
    boolean heartbeat = false;
    TreeSet<Integer> present = new TreeSet<>();
    for (int i = 0; i < n; i++) {
      Row row = rows.get(i);
      if (idle >= 0 && idleTimeoutMs >= 0 && row.getLong(idle) == HEARTBEAT) {
        beat[i] = true;
        heartbeat = true;
      }
      present.add((int) Math.floorMod(row.getLong(key), (long) buckets));
    }

    TaskContext task = TaskContext.get();
    String batch = task == null ? null : task.getLocalProperty("streaming.sql.batchId");
    Store store = null;
    long batchId = -1;
    if (batch != null) {
      batchId = Long.parseLong(batch);
      store = new Store(Hadoop.checkpoint(checkpoint, task) + "/" + directory);
    }
    Map<Long, long[]> state = new HashMap<>(); // key -> {max_us, seen_ms, advanced_ms}
    Map<Integer, Integer> loaded = new HashMap<>();
    for (int bucket : present) {
      int before = state.size();
      if (store != null) {
        store.load(bucket, batchId, state);
      }
      loaded.put(bucket, state.size() - before);
    }
    if (ttlMs >= 0) { // forgotten first: a key back after the TTL starts afresh
      state.values().removeIf(s -> s[1] < nowMs - ttlMs);
    }

    long[] system = new long[n];
    long[] verdicts = new long[n];
    long[] behind = new long[n];
    judge(rows, beat, state, nowMs, system, verdicts, behind);
    long[] synthetic = null;
    if (heartbeat && idleTimeoutMs >= 0) {
      synthetic = advanceIdle(state, nowMs);
    }
    if (store != null) {
      Map<Integer, TreeMap<Long, long[]>> parts = new HashMap<>(); // bucket -> its keys, in order
      for (Map.Entry<Long, long[]> e : state.entrySet()) {
        int bucket = (int) Math.floorMod(e.getKey(), (long) buckets);
        parts.computeIfAbsent(bucket, b -> new TreeMap<>()).put(e.getKey(), e.getValue());
      }
      for (int bucket : present) {
        TreeMap<Long, long[]> part = parts.getOrDefault(bucket, new TreeMap<>());
        if (!part.isEmpty() || loaded.get(bucket) > 0) { // nothing before or after: no file
          store.save(bucket, batchId, part);
        }
      }
    }

    List<Row> out = new ArrayList<>(n + 1);
    int firstBeat = -1;
    for (int i = 0; i < n; i++) {
      Row row = rows.get(i);
      if (beat[i]) {
        firstBeat = firstBeat < 0 ? i : firstBeat;
        continue;
      }
      Object[] values = values(row);
      values[ts] = row.isNullAt(ts) ? null : system[i];
      values[verdict] = typed(row.get(verdict), verdicts[i]);
      values[lateness] = behind[i] < 0 ? null : behind[i];
      out.add(select(values));
    }
    if (synthetic != null && firstBeat >= 0) { // a heartbeat row carrying the moved clock
      Row row = rows.get(firstBeat);
      Object[] values = values(row);
      values[ts] = synthetic[0];
      values[verdict] = typed(row.get(verdict), 0);
      values[idle] = synthetic[1];
      out.add(select(values));
    }
    return out.iterator();
  }

  /**
   * The out-of-order verdicts of the real rows, per key in arrival order, and the keys' new
   * state; heartbeat rows are left alone.
   */
  private void judge(
      List<Row> rows,
      boolean[] beat,
      Map<Long, long[]> state,
      long nowMs,
      long[] system,
      long[] verdicts,
      long[] behind) {
    int n = rows.size();
    long[] keys = new long[n];
    long[] arrivals = new long[n];
    long[] times = new long[n];
    boolean[] candidate = new boolean[n];
    Map<Long, int[]> groups = new HashMap<>(); // key -> {count, row, row, ...}
    for (int i = 0; i < n; i++) {
      if (beat[i]) {
        continue;
      }
      Row row = rows.get(i);
      keys[i] = row.getLong(key);
      arrivals[i] = row.isNullAt(arrival) ? 0 : row.getLong(arrival);
      times[i] = row.isNullAt(ts) ? 0 : row.getLong(ts);
      verdicts[i] = ((Number) row.get(verdict)).longValue();
      candidate[i] = (verdicts[i] & candidateBits) == 0;
      int[] group = groups.get(keys[i]);
      if (group == null) {
        group = new int[4];
      } else if (group[0] + 1 == group.length) {
        group = Arrays.copyOf(group, group.length * 2);
      }
      group[++group[0]] = i;
      groups.put(keys[i], group);
    }
    for (Map.Entry<Long, int[]> entry : groups.entrySet()) {
      int[] group = entry.getValue();
      Integer[] order = inArrivalOrder(group, arrivals);
      long[] known = state.get(entry.getKey());
      long start = known == null ? NONE : known[0];
      long best = NONE; // the largest candidate timestamp before the row
      for (int k = 0; k < group[0]; k++) {
        int i = order == null ? group[k + 1] : order[k];
        long before = Math.max(best, start);
        boolean hasMark = before != NONE;
        long watermark = hasMark ? before - toleranceUs : NONE;
        boolean late = candidate[i] && hasMark && times[i] < watermark;
        system[i] = late && !drop ? watermark : times[i];
        behind[i] = candidate[i] ? (hasMark ? Math.max(before - times[i], 0) : 0) : -1;
        if (late) {
          verdicts[i] |= oooBit;
        }
        if (candidate[i]) {
          best = Math.max(best, times[i]);
        }
      }
      long last = Math.max(best, start);
      if (known != null) { // new maximum, seen now, no longer idle
        known[0] = last;
        known[1] = nowMs;
        known[2] = -1;
      } else if (last != NONE) { // a new key, if a row counted
        state.put(entry.getKey(), new long[] {last, nowMs, -1});
      }
    }
  }

  /** The group's rows (after its count) in arrival order, ties in input order; null if so. */
  private static Integer[] inArrivalOrder(int[] group, long[] arrivals) {
    int count = group[0];
    boolean sorted = true;
    for (int k = 2; k <= count && sorted; k++) {
      sorted = arrivals[group[k - 1]] <= arrivals[group[k]];
    }
    if (sorted) {
      return null;
    }
    Integer[] order = new Integer[count];
    for (int k = 0; k < count; k++) {
      order[k] = group[k + 1];
    }
    // Stable: rows were added in input order.
    Arrays.sort(order, (a, b) -> Long.compare(arrivals[a], arrivals[b]));
    return order;
  }

  /**
   * The idle-timeout rule ({@code wmobs/policy/_idle.py}), in place: every key idle for the
   * timeout has its clock moved on. {largest moved timestamp µs, firings}, or null when no
   * clock moved.
   */
  private long[] advanceIdle(Map<Long, long[]> state, long nowMs) {
    long top = NONE;
    long firings = 0;
    boolean any = false;
    for (long[] s : state.values()) {
      long idleSince = s[1] + idleTimeoutMs;
      if (nowMs < idleSince) {
        continue;
      }
      any = true;
      boolean starting = s[2] < 0;
      long lagMs = s[1] - Math.floorDiv(s[0], 1000L);
      long jumpMs = starting ? Math.min(Math.max(lagMs, 0), idleTimeoutMs) : 0;
      long begin = starting ? idleSince : Math.max(s[2], idleSince);
      s[0] = s[0] + (Math.max(nowMs - begin, 0) + jumpMs) * 1000;
      s[2] = nowMs;
      firings += starting ? 1 : 0;
      top = Math.max(top, s[0]);
    }
    return any ? new long[] {top, firings} : null;
  }

  private static Object[] values(Row row) {
    Object[] values = new Object[row.length()];
    for (int i = 0; i < values.length; i++) {
      values[i] = row.get(i);
    }
    return values;
  }

  private Row select(Object[] values) {
    Object[] selected = new Object[output.length];
    for (int i = 0; i < output.length; i++) {
      selected[i] = values[output[i]];
    }
    return RowFactory.create(selected);
  }

  /** {@code value} as the type of {@code like} (the verdict column is an int or a long). */
  private static Object typed(Object like, long value) {
    return like instanceof Integer ? (Object) (int) value : (Object) value;
  }

  /** The state files of one query's substreams ({@code _substream_state.StateStore}). */
  private final class Store {
    private final String root;
    private final Configuration hadoop = conf.value().value();

    Store(String root) {
      this.root = root.replaceAll("/+$", "");
    }

    /** Adds the bucket's state as the newest batch before {@code batchId} left it. */
    void load(int bucket, long batchId, Map<Long, long[]> into) throws IOException {
      long stale = System.currentTimeMillis() - STALE_MS;
      List<Long> versions = new ArrayList<>();
      for (Hadoop.Entry entry : Hadoop.list(new Path(root + "/" + bucket), hadoop)) {
        String name = entry.name();
        if (name.endsWith(".tmp") && entry.modifiedMs() < stale) {
          // left by a task that died an hour ago or more
          Hadoop.delete(new Path(root + "/" + bucket + "/" + name), hadoop);
        } else if (name.matches("[0-9]+\\.arrow")) {
          long version = Long.parseLong(name.substring(0, name.length() - ".arrow".length()));
          if (version < batchId) {
            versions.add(version);
          }
        }
      }
      if (versions.isEmpty()) {
        return;
      }
      Collections.sort(versions);
      for (long old : versions.subList(0, versions.size() - 1)) { // from a run that stopped
        Hadoop.delete(file(bucket, old), hadoop);
      }
      byte[] data = Hadoop.read(file(bucket, versions.get(versions.size() - 1)), hadoop);
      try (BufferAllocator allocator = ARROW.newChildAllocator("wmobs-state", 0, Long.MAX_VALUE);
          ArrowStreamReader reader =
              new ArrowStreamReader(new ByteArrayInputStream(data), allocator)) {
        VectorSchemaRoot table = reader.getVectorSchemaRoot();
        while (reader.loadNextBatch()) {
          BigIntVector[] columns = new BigIntVector[STATE_COLUMNS.length];
          for (int c = 0; c < columns.length; c++) {
            columns[c] = (BigIntVector) table.getVector(STATE_COLUMNS[c]);
          }
          for (int r = 0; r < table.getRowCount(); r++) {
            into.put(
                columns[0].get(r),
                new long[] {columns[1].get(r), columns[2].get(r), columns[3].get(r)});
          }
        }
      }
    }

    /** Writes the bucket's state after {@code batchId}, keys in order. */
    void save(int bucket, long batchId, TreeMap<Long, long[]> part) throws IOException {
      List<Field> fields = new ArrayList<>();
      for (String name : STATE_COLUMNS) {
        fields.add(Field.nullable(name, new ArrowType.Int(64, true)));
      }
      ByteArrayOutputStream buffer = new ByteArrayOutputStream();
      try (BufferAllocator allocator = ARROW.newChildAllocator("wmobs-state", 0, Long.MAX_VALUE);
          VectorSchemaRoot table = VectorSchemaRoot.create(new Schema(fields), allocator)) {
        BigIntVector[] columns = new BigIntVector[STATE_COLUMNS.length];
        for (int c = 0; c < columns.length; c++) {
          columns[c] = (BigIntVector) table.getVector(c);
          columns[c].allocateNew(part.size());
        }
        int r = 0;
        for (Map.Entry<Long, long[]> e : part.entrySet()) {
          columns[0].set(r, e.getKey());
          for (int c = 1; c < columns.length; c++) {
            columns[c].set(r, e.getValue()[c - 1]);
          }
          r++;
        }
        table.setRowCount(part.size());
        try (ArrowStreamWriter writer =
            new ArrowStreamWriter(table, null, Channels.newChannel(buffer))) {
          writer.start();
          writer.writeBatch();
          writer.end();
        }
      }
      Hadoop.writeOnce(file(bucket, batchId), buffer.toByteArray(), hadoop);
    }

    private Path file(int bucket, long version) {
      return new Path(root + "/" + bucket + "/" + version + ".arrow");
    }
  }
}
