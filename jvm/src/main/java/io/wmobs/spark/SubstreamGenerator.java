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
import org.apache.spark.SparkEnv;
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
import org.apache.spark.sql.execution.UnsafeExternalRowSorter;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.SerializableConfiguration;
import org.apache.spark.util.collection.unsafe.sort.PrefixComparators;
import org.apache.spark.util.collection.unsafe.sort.RecordComparator;

/**
 * Substreams in the JVM: {@code wmobs_substreams(spec, c0, c1, ...)}, a generator of every
 * column of rows shuffled by key bucket, in a {@code select} of its own, which yields the
 * judged rows with the same columns. Per partition: the rows go into Spark's external sorter
 * (its memory pages, spilled to disk when the task's memory runs short: a task never holds its
 * partition on the heap), by arrival and the order they came in (a radix sort of the arrival
 * time); when the partition ends they come back one at a time and are judged ({@link
 * SubstreamRules.Sorted}) against their key's state, read when the key's bucket first turns up
 * ({@link SubstreamState}), and go on
 * with their system timestamp, verdict and lateness written in place; after the last one the
 * state of the partition's buckets is written, and the synthetic row of an idle-timeout firing,
 * if any, follows. (It was a {@code mapPartitions} function: every row became a {@code Row} of
 * Java objects and back, 0.05x of the query; then a list of the partition's rows on the heap,
 * which a large micro-batch of few keys ran out of memory with.)
 *
 * <p>{@code spec}: JSON with {@code columns} (the arguments' names, also the output's),
 * {@code checkpoint} ("" for a named query's), {@code directory} (the state's, below the
 * checkpoint), {@code buckets}, {@code tolerance_us}, {@code drop}, {@code ttl_ms} and {@code
 * idle_timeout_ms} (null: none), {@code candidate_bits} (verdict bits of rows no longer in
 * play), {@code ooo_bit}, and the argument positions of {@code key}, {@code ts}, {@code
 * arrival}, {@code verdict}, {@code idle} (null: no idle timeout) and {@code lateness}, and
 * optionally of {@code slowest} and {@code fastest}: the smallest and largest of the
 * partition's keys' largest system timestamps, written on its last row (null elsewhere).
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
  // The running task's judge; each task deserializes an instance of its own.
  private transient Judge.Run run;
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
    if (run == null) {
      project = UnsafeProjection.create(children());
      inPlace = plainColumns();
      boolean intVerdict = columns.get(judge.verdict).dataType() == DataTypes.IntegerType;
      try {
        run = judge.start(elementSchema(), intVerdict);
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }
    UnsafeRow unsafe =
        inPlace && row instanceof UnsafeRow u && u.numFields() == judge.names.length
            ? u
            : project.apply(row);
    try {
      run.add(unsafe);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
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
    Judge.Run done = run;
    run = null;
    if (done == null) {
      return Collections.emptyIterator();
    }
    try {
      return done.judged();
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
     * A task's judge of rows of {@code schema} ({@code intVerdict}: the verdict column is an
     * int, not a long).
     */
    Run start(StructType schema, boolean intVerdict) throws IOException {
      return new Run(schema, intVerdict);
    }

    /**
     * One task's rows: {@link #add} each (into Spark's external sorter), then {@link #judged}
     * yields them judged, one at a time, in the sorter's order.
     */
    final class Run {
      private final boolean intVerdict;
      private final long nowMs = System.currentTimeMillis();
      private final SubstreamState store;
      private final long batchId;
      private SubstreamState.Listing listing;
      private final Map<Long, long[]> state = new HashMap<>(); // key -> {max_us, seen, advanced}
      private final boolean[] seen = new boolean[buckets];
      private final int[] loaded = new int[buckets]; // keys read per bucket
      private final SubstreamRules.Sorted judged;
      private final UnsafeExternalRowSorter sorter;
      /** How many rows were added: each one's place, in its lateness column until judged. */
      private long added;
      /** The last row judged, held back: the partition's spread goes on its last row. */
      private UnsafeRow held;
      /** The first heartbeat row: it carries the moved clock of an idle-timeout firing. */
      private UnsafeRow beat;

      private Run(StructType schema, boolean intVerdict) throws IOException {
        this.intVerdict = intVerdict;
        TaskContext task = TaskContext.get();
        String batch = task == null ? null : task.getLocalProperty("streaming.sql.batchId");
        if (batch != null) {
          batchId = Long.parseLong(batch);
          String root = Hadoop.checkpoint(checkpoint, task) + "/" + directory;
          store = new SubstreamState(root, buckets, conf.value().value());
        } else {
          batchId = -1;
          store = null;
        }
        judged = rules.sorted(state, nowMs);
        int fields = schema.length();
        sorter =
            UnsafeExternalRowSorter.createWithRecordComparator(
                schema,
                () -> new Order(fields),
                PrefixComparators.LONG,
                new ArrivalPrefix(),
                SparkEnv.get().memoryManager().pageSizeBytes(),
                true);
      }

      /**
       * By arrival (null as 0; the prefix, radix-sorted, which keeps ties in the order they came
       * in), then the order rows came in (merging what was spilled).
       */
      private final class Order extends RecordComparator {
        private final UnsafeRow left;
        private final UnsafeRow right;

        Order(int fields) {
          left = new UnsafeRow(fields);
          right = new UnsafeRow(fields);
        }

        @Override
        public int compare(Object lo, long lOffset, int lLength, Object ro, long rOffset, int rLength) {
          left.pointTo(lo, lOffset, lLength);
          right.pointTo(ro, rOffset, rLength);
          int byArrival = Long.compare(arrivalOf(left), arrivalOf(right));
          return byArrival != 0
              ? byArrival
              : Long.compare(left.getLong(lateness), right.getLong(lateness));
        }
      }

      /** The sort prefix: the arrival time, whole. */
      private final class ArrivalPrefix extends UnsafeExternalRowSorter.PrefixComputer {
        private final Prefix prefix = new Prefix();

        @Override
        public Prefix computePrefix(InternalRow row) {
          prefix.value = arrivalOf(row);
          prefix.isNull = false;
          return prefix;
        }
      }

      private long arrivalOf(InternalRow row) {
        return row.isNullAt(arrival) ? 0 : row.getLong(arrival);
      }

      /** One row of the partition, into the sorter (copied there; {@code row} is marked). */
      void add(UnsafeRow row) throws IOException {
        row.setLong(lateness, added++);
        sorter.insertRow(row);
      }

      /** The partition's rows, judged as they are taken; then what {@link #finish} adds. */
      Iterator<InternalRow> judged() throws IOException {
        scala.collection.Iterator<InternalRow> sorted = sorter.sort();
        return new Iterator<InternalRow>() {
          private UnsafeRow next;
          private Iterator<UnsafeRow> rest;

          @Override
          public boolean hasNext() {
            try {
              while (next == null && rest == null) {
                if (sorted.hasNext()) {
                  next = take((UnsafeRow) sorted.next());
                } else {
                  rest = finish().iterator();
                }
              }
              return next != null || rest.hasNext();
            } catch (IOException e) {
              throw new UncheckedIOException(e);
            }
          }

          @Override
          public InternalRow next() {
            if (!hasNext()) {
              throw new java.util.NoSuchElementException();
            }
            if (next != null) {
              UnsafeRow out = next;
              next = null;
              return out;
            }
            return rest.next();
          }
        };
      }

      /** Judges {@code row}; the row judged before it, or null (a copy of each). */
      private UnsafeRow take(UnsafeRow row) throws IOException {
        int bucket = (int) Math.floorMod(row.getLong(key), (long) buckets);
        if (!seen[bucket]) {
          seen[bucket] = true;
          load(bucket);
        }
        if (idle >= 0 && rules.idleTimeoutMs >= 0 && row.getLong(idle) == HEARTBEAT) {
          beat = beat == null ? row.copy() : beat;
          return null;
        }
        judged.row(row.getLong(key), row.isNullAt(ts) ? 0 : row.getLong(ts), verdictOf(row));
        UnsafeRow copy = row.copy();
        if (!copy.isNullAt(ts)) {
          copy.setLong(ts, judged.system);
        }
        setVerdict(copy, intVerdict, judged.verdict);
        if (judged.behind < 0) {
          copy.setNullAt(lateness);
        } else {
          copy.setLong(lateness, judged.behind);
        }
        UnsafeRow before = held;
        held = copy;
        return before;
      }

      /** The bucket's keys as the micro-batch before left them, those past their TTL forgotten. */
      private void load(int bucket) throws IOException {
        if (store == null) {
          return;
        }
        if (listing == null) {
          listing = store.list(batchId);
        }
        Map<Long, long[]> keys = new HashMap<>();
        loaded[bucket] = store.load(listing, bucket, keys);
        rules.forget(keys, nowMs);
        state.putAll(keys);
      }

      /**
       * Ends the partition (its last row judged): its buckets' state written, and what is left
       * to yield: the last row judged, with the partition's spread, and the synthetic row of
       * an idle-timeout firing, if any.
       */
      private List<UnsafeRow> finish() throws IOException {
        long[] spread = judged.finish();
        long[] synthetic = beat != null ? rules.advanceIdle(state, nowMs) : null;
        if (store != null) {
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
          if (listing != null) {
            store.tidy(listing);
          }
        }
        List<UnsafeRow> out = new ArrayList<>(2);
        if (held != null) {
          // The partition's spread, on its last row; the column is null on every row it gets.
          if (slowest >= 0 && spread[0] != SubstreamRules.NONE) {
            held.setLong(slowest, spread[0]);
            held.setLong(fastest, spread[1]);
          }
          out.add(held);
        }
        if (synthetic != null) { // a heartbeat row carrying the moved clock
          beat.setLong(ts, synthetic[0]);
          setVerdict(beat, intVerdict, 0);
          beat.setLong(idle, synthetic[1]);
          out.add(beat);
        }
        return out;
      }

      private long verdictOf(UnsafeRow row) {
        return intVerdict ? row.getInt(verdict) : row.getLong(verdict);
      }
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
