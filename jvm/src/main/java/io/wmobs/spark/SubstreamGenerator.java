package io.wmobs.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.TaskContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.BoundReference;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.SerializableConfiguration;

/**
 * Substreams in the JVM: {@code wmobs_substreams(spec, c0, c1, ...)}, a generator of every
 * column of rows shuffled by key bucket, in a {@code select} of its own, which yields the
 * judged rows with the same columns. Per partition: the rows are buffered (Spark's binary
 * rows, copied once), the state of their keys' buckets is read ({@link SubstreamState}), the
 * rows are judged ({@link SubstreamRules}) and the state written back before any row goes on,
 * then the rows are yielded with their system timestamp, verdict and lateness written in
 * place, in input order, and the synthetic row of an idle-timeout firing, if any. (It was a
 * {@code mapPartitions} function: every row became a {@code Row} of Java objects and back,
 * 0.05x of the query.)
 *
 * <p>{@code spec}: JSON with {@code columns} (the arguments' names, also the output's),
 * {@code checkpoint} ("" for a named query's), {@code directory} (the state's, below the
 * checkpoint), {@code buckets}, {@code tolerance_us}, {@code drop}, {@code ttl_ms} and {@code
 * idle_timeout_ms} (null: none), {@code candidate_bits} (verdict bits of rows no longer in
 * play), {@code ooo_bit}, and the argument positions of {@code key}, {@code ts}, {@code
 * arrival}, {@code verdict}, {@code idle} (null: no idle timeout) and {@code lateness}, and
 * optionally of {@code slowest} and {@code fastest}: the smallest and largest of the
 * partition's keys' largest system timestamps, written on its first row (null elsewhere).
 * ({@code pass_through}: yield every row as it is, judge nothing; a diagnostic of the
 * benchmarks, to measure what the judge costs.)
 */
public final class SubstreamGenerator extends WmobsGenerator implements Serializable {
  private static final long serialVersionUID = 3L;
  /** The idle column of a heartbeat row on its way into the judge. */
  private static final long HEARTBEAT = -2;

  private final Judge judge;
  private final String name;
  private final List<Expression> columns;
  // The running task's buffer; each task deserializes an instance of its own.
  private transient List<UnsafeRow> rows;
  private transient UnsafeProjection project;
  private transient boolean inPlace;

  private SubstreamGenerator(Judge judge, String name, List<Expression> columns) {
    this.judge = judge;
    this.name = name;
    this.columns = List.copyOf(columns);
  }

  /** The function {@code name}, built from its arguments (the spec first). */
  static Expression build(String name, List<Expression> arguments) {
    Judge judge = new Judge(Spec.json(name, arguments), Hadoop.sessionConf());
    List<Expression> columns = Spec.rest(arguments);
    Spec.arity(name, columns, judge.names.length);
    return new SubstreamGenerator(judge, name, columns);
  }

  @Override
  protected Iterator<InternalRow> rows(InternalRow row) {
    if (judge.passThrough) {
      return List.of(row).iterator();
    }
    if (rows == null) {
      rows = new ArrayList<>();
      project = UnsafeProjection.create(children());
      inPlace = plainColumns();
    }
    if (inPlace && row instanceof UnsafeRow unsafe && unsafe.numFields() == judge.names.length) {
      rows.add(unsafe.copy());
    } else {
      rows.add(project.apply(row).copy());
    }
    return Collections.emptyIterator();
  }

  /** True if the arguments are the input's columns in order (bound: its ordinals 0, 1, ...). */
  private boolean plainColumns() {
    for (int i = 0; i < columns.size(); i++) {
      if (!(columns.get(i) instanceof BoundReference b) || b.ordinal() != i) {
        return false;
      }
    }
    return true;
  }

  @Override
  protected Iterator<InternalRow> finish() {
    List<UnsafeRow> buffered = rows;
    rows = null;
    if (buffered == null || buffered.isEmpty()) {
      return Collections.emptyIterator();
    }
    boolean intVerdict = columns.get(judge.verdict).dataType() == DataTypes.IntegerType;
    try {
      List<InternalRow> judged = new ArrayList<>(judge.judge(buffered, intVerdict));
      return judged.iterator();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  @Override
  public StructType elementSchema() {
    StructField[] fields = new StructField[judge.names.length];
    for (int i = 0; i < fields.length; i++) {
      Expression child = columns.get(i);
      fields[i] =
          new StructField(judge.names[i], child.dataType(), child.nullable(), Metadata.empty());
    }
    return new StructType(fields);
  }

  @Override
  protected List<Expression> arguments() {
    return columns;
  }

  @Override
  protected Expression withArguments(List<Expression> arguments) {
    return new SubstreamGenerator(judge, name, arguments);
  }

  @Override
  protected List<Object> fields() {
    return List.of(judge, name, children());
  }

  @Override
  public String prettyName() {
    return name;
  }

  /** One policy's spec, and what a task does with its partition. */
  static final class Judge implements Serializable {
    private static final long serialVersionUID = 1L;
    private final String checkpoint;
    private final String directory;
    private final int buckets;
    private final SubstreamRules rules;
    private final int key;
    private final int ts;
    private final int arrival;
    private final int verdict;
    private final int idle; // -1: none
    private final int lateness;
    /** Where the partition's slowest and fastest key's largest timestamps go (-1: nowhere). */
    private final int slowest;
    private final int fastest;
    private final String[] names;
    private final boolean passThrough;
    private final Broadcast<SerializableConfiguration> conf;

    Judge(JsonNode spec, Broadcast<SerializableConfiguration> conf) {
      checkpoint = spec.get("checkpoint").asText();
      directory = spec.get("directory").asText();
      buckets = spec.get("buckets").asInt();
      rules =
          new SubstreamRules(
              spec.get("tolerance_us").asLong(),
              spec.get("drop").asBoolean(),
              spec.path("ttl_ms").asLong(-1),
              spec.path("idle_timeout_ms").asLong(-1),
              spec.get("candidate_bits").asLong(),
              spec.get("ooo_bit").asLong());
      key = spec.get("key").asInt();
      ts = spec.get("ts").asInt();
      arrival = spec.get("arrival").asInt();
      verdict = spec.get("verdict").asInt();
      idle = spec.path("idle").asInt(-1);
      lateness = spec.get("lateness").asInt();
      slowest = spec.path("slowest").asInt(-1);
      fastest = spec.path("fastest").asInt(-1);
      JsonNode columns = spec.get("columns");
      names = new String[columns.size()];
      for (int i = 0; i < names.length; i++) {
        names[i] = columns.get(i).asText();
      }
      passThrough = spec.path("pass_through").asBoolean(false);
      if (buckets < 1 || buckets > 64) {
        throw new IllegalArgumentException("wmobs: substreams need 1 to 64 buckets, not " + buckets);
      }
      this.conf = conf;
    }

    /**
     * One partition's rows (each a copy of its own, with the arguments' columns), judged: the
     * real rows with their system timestamp, verdict and lateness written in place, in input
     * order, then the synthetic row of an idle-timeout firing, if any. {@code intVerdict}: the
     * verdict column is an int, not a long.
     */
    List<UnsafeRow> judge(List<UnsafeRow> rows, boolean intVerdict) throws IOException {
      long nowMs = System.currentTimeMillis();
      int total = rows.size();
      boolean heartbeat = false;
      int firstBeat = -1;
      boolean[] seen = new boolean[buckets];
      int[] real = new int[total]; // the real rows' positions
      int n = 0;
      for (int i = 0; i < total; i++) {
        UnsafeRow row = rows.get(i);
        seen[(int) Math.floorMod(row.getLong(key), (long) buckets)] = true;
        if (idle >= 0 && rules.idleTimeoutMs >= 0 && row.getLong(idle) == HEARTBEAT) {
          heartbeat = true;
          firstBeat = firstBeat < 0 ? i : firstBeat;
        } else {
          real[n++] = i;
        }
      }
      TaskContext task = TaskContext.get();
      String batch = task == null ? null : task.getLocalProperty("streaming.sql.batchId");
      SubstreamState store = null;
      long batchId = -1;
      if (batch != null) {
        batchId = Long.parseLong(batch);
        String root = Hadoop.checkpoint(checkpoint, task) + "/" + directory;
        store = new SubstreamState(root, buckets, conf.value().value());
      }
      Map<Long, long[]> state = new HashMap<>(); // key -> {max_us, seen_ms, advanced_ms}
      int[] loaded = new int[buckets]; // keys read per bucket
      if (store != null) {
        store.load(seen, batchId, state, loaded);
      }
      rules.forget(state, nowMs);

      long[] keys = new long[n];
      long[] arrivals = new long[n];
      long[] times = new long[n];
      long[] verdicts = new long[n];
      for (int r = 0; r < n; r++) {
        UnsafeRow row = rows.get(real[r]);
        keys[r] = row.getLong(key);
        arrivals[r] = row.isNullAt(arrival) ? 0 : row.getLong(arrival);
        times[r] = row.isNullAt(ts) ? 0 : row.getLong(ts);
        verdicts[r] = intVerdict ? row.getInt(verdict) : row.getLong(verdict);
      }
      long[] system = new long[n];
      long[] behind = new long[n];
      long[] spread = rules.judge(n, keys, arrivals, times, verdicts, state, nowMs, system, behind);
      long[] synthetic = heartbeat ? rules.advanceIdle(state, nowMs) : null;
      if (store != null) { // written before any row goes on
        TreeMap<Long, long[]> sorted = new TreeMap<>(state);
        long written = 0; // buckets with keys before or after (none: no file)
        for (int bucket = 0; bucket < buckets; bucket++) {
          if (seen[bucket] && loaded[bucket] > 0) {
            written |= 1L << bucket;
          }
        }
        for (long k : sorted.keySet()) {
          written |= 1L << Math.floorMod(k, (long) buckets);
        }
        if (written != 0) {
          store.save(batchId, written, sorted);
        }
      }

      List<UnsafeRow> out = new ArrayList<>(n + 1);
      for (int r = 0; r < n; r++) {
        UnsafeRow row = rows.get(real[r]);
        if (!row.isNullAt(ts)) {
          row.setLong(ts, system[r]);
        }
        setVerdict(row, intVerdict, verdicts[r]);
        if (behind[r] < 0) {
          row.setNullAt(lateness);
        } else {
          row.setLong(lateness, behind[r]);
        }
        out.add(row);
      }
      // The partition's spread, on its first row; the column is null on every row it gets.
      if (slowest >= 0 && n > 0 && spread[0] != SubstreamRules.NONE) {
        rows.get(real[0]).setLong(slowest, spread[0]);
        rows.get(real[0]).setLong(fastest, spread[1]);
      }
      if (synthetic != null) { // a heartbeat row carrying the moved clock
        UnsafeRow row = rows.get(firstBeat);
        row.setLong(ts, synthetic[0]);
        setVerdict(row, intVerdict, 0);
        row.setLong(idle, synthetic[1]);
        out.add(row);
      }
      return out;
    }

    private void setVerdict(UnsafeRow row, boolean intVerdict, long value) {
      if (intVerdict) {
        row.setInt(verdict, (int) value);
      } else {
        row.setLong(verdict, value);
      }
    }
  }
}
