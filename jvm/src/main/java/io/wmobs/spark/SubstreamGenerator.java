package io.wmobs.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Arrays;
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
import org.apache.spark.sql.catalyst.expressions.codegen.GenerateUnsafeRowJoiner;
import org.apache.spark.sql.catalyst.expressions.codegen.UnsafeRowJoiner;
import org.apache.spark.sql.execution.UnsafeExternalRowSorter;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.SerializableConfiguration;
import org.apache.spark.util.collection.unsafe.sort.PrefixComparators;
import org.apache.spark.util.collection.unsafe.sort.RecordComparator;

/**
 * Substreams in the JVM: {@code wmobs_substreams(spec, c0, c1, ...)}, a generator of every
 * column of rows shuffled by key bucket, in a {@code select} of its own, which yields the
 * judged rows with the same columns and three more ({@code appended}: lateness, and the
 * partition's slowest and fastest key). Per partition: the rows go into Spark's external sorter
 * (its memory pages, spilled to disk when the task's memory runs short: a task never holds its
 * partition on the heap) as they come (no copy of their own where the arguments are the input's
 * columns), by arrival and the order they came in (a radix sort of the arrival time); when the
 * partition ends they come back one at a time and are judged ({@link SubstreamRules.Sorted})
 * against their key's state, read when the key's bucket first turns up ({@link
 * SubstreamState}), and go on with their system timestamp and verdict written in place and the
 * appended columns beside them; after the last one the state of the partition's buckets is
 * written, and the synthetic row of an idle-timeout firing, if any, follows. (It was a {@code
 * mapPartitions} function: every row became a {@code Row} of Java objects and back, 0.05x of the
 * query; then a list of the partition's rows on the heap, which a large micro-batch of few keys
 * ran out of memory with; then each row was copied into the sorter's layout with three null
 * columns the judge would fill in, which Spark folded into the generator's arguments.)
 *
 * <p>{@code spec}: JSON with {@code columns} (the arguments' names, also the output's),
 * {@code checkpoint} ("" for a named query's), {@code directory} (the state's, below the
 * checkpoint), {@code buckets}, {@code tolerance_us}, {@code drop}, {@code ttl_ms} and {@code
 * idle_timeout_ms} (null: none), {@code candidate_bits} (verdict bits of rows no longer in
 * play), {@code ooo_bit}, the argument positions of {@code key}, {@code ts}, {@code arrival},
 * {@code verdict} and {@code idle} (null: no idle timeout), and {@code appended}: the names of
 * the three columns the judge adds, a row's lateness (null where not in play) and the smallest
 * and largest of the partition's keys' largest system timestamps, on its last row (null
 * elsewhere).
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
  private transient boolean started;
  /** The arguments are the input's columns in order: its rows go into the sorter as they are. */
  private transient boolean plain;
  private transient UnsafeProjection project; // where they are not, made when first needed
  private transient UnsafeRowJoiner passing; // the pass-through diagnostic's

  private SubstreamGenerator(Judge judge, String name, List<Expression> columns) {
    this.judge = judge;
    this.name = name;
    this.columns = List.copyOf(columns);
  }

  /** The function {@code name}, built from its arguments (the spec first). */
  static Expression build(String name, List<Expression> arguments) {
    Judge judge = new Judge(Spec.json(name, arguments), Hadoop.sessionConf());
    List<Expression> columns = Spec.rest(arguments);
    Spec.arity(name, columns, judge.inputs);
    return new SubstreamGenerator(judge, name, columns);
  }

  @Override
  protected Iterator<InternalRow> rows(InternalRow row) {
    UnsafeRow unsafe = argumentsOf(row);
    if (judge.passThrough) {
      passing = passing != null ? passing : judge.joiner(inputSchema());
      return List.<InternalRow>of(passing.join(unsafe, Judge.NOTHING)).iterator();
    }
    try {
      if (run == null) {
        boolean intVerdict = columns.get(judge.verdict).dataType() == DataTypes.IntegerType;
        run = judge.start(inputSchema(), intVerdict);
      }
      run.add(unsafe);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return Collections.emptyIterator();
  }

  /** The arguments' values: {@code row} itself where they are its columns, else a projection. */
  private UnsafeRow argumentsOf(InternalRow row) {
    if (!started) {
      started = true;
      plain = plainColumns();
    }
    if (plain && row instanceof UnsafeRow u && u.numFields() == columns.size()) {
      return u;
    }
    if (project == null) {
      project = UnsafeProjection.create(children());
    }
    return project.apply(row);
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

  /** The arguments' columns (the output's without the appended ones). */
  private StructType inputSchema() {
    return new StructType(Arrays.copyOf(elementSchema().fields(), columns.size()));
  }

  @Override
  public StructType elementSchema() {
    StructField[] fields = new StructField[judge.names.length];
    for (int i = 0; i < fields.length; i++) {
      boolean input = i < columns.size();
      fields[i] =
          new StructField(
              judge.names[i],
              input ? columns.get(i).dataType() : DataTypes.LongType,
              !input || columns.get(i).nullable(),
              Metadata.empty());
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
    private final Hadoop.Checkpoint checkpoint;
    private final String directory;
    private final int buckets;
    private final SubstreamRules rules;
    private final int key;
    private final int ts;
    private final int arrival;
    private final int verdict;
    private final int idle; // -1: none
    /** How many columns come in; the output's names, those of the appended three last. */
    private final int inputs;
    private final String[] names;
    private final boolean passThrough;
    private final Broadcast<SerializableConfiguration> conf;

    Judge(JsonNode spec, Broadcast<SerializableConfiguration> conf) {
      checkpoint = Hadoop.Checkpoint.onDriver(spec.get("checkpoint").asText()); // on the driver
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
      JsonNode columns = spec.get("columns");
      JsonNode appended = spec.get("appended");
      if (appended == null || appended.size() != APPENDED) {
        throw new IllegalArgumentException(
            "wmobs: substreams append " + APPENDED + " columns, named in the spec's 'appended'");
      }
      inputs = columns.size();
      names = new String[inputs + APPENDED];
      for (int i = 0; i < names.length; i++) {
        names[i] = (i < inputs ? columns.get(i) : appended.get(i - inputs)).asText();
      }
      passThrough = spec.path("pass_through").asBoolean(false);
      if (buckets < 1 || buckets > 64) {
        throw new IllegalArgumentException("wmobs: substreams need 1 to 64 buckets, not " + buckets);
      }
      this.conf = conf;
    }

    /** The columns the judge appends: lateness, slowest and fastest. */
    static final int APPENDED = 3;

    /**
     * A task's judge of rows of {@code schema}, the arguments' ({@code intVerdict}: the verdict
     * column is an int, not a long).
     */
    Run start(StructType schema, boolean intVerdict) throws IOException {
      return new Run(schema, intVerdict);
    }

    /** The appended columns, all null: what the judge joins to a row, then fills in. */
    static final UnsafeRow NOTHING = nothing();

    private static UnsafeRow nothing() {
      UnsafeRow row = new UnsafeRow(APPENDED);
      int size = UnsafeRow.calculateBitSetWidthInBytes(APPENDED) + 8 * APPENDED;
      row.pointTo(new byte[size], size);
      for (int i = 0; i < APPENDED; i++) {
        row.setNullAt(i);
      }
      return row;
    }

    /**
     * Spark's joiner of a row of {@code schema} and the appended columns into one row of the
     * output's (a copy in memory of its own, reused by the joiner's next row).
     */
    UnsafeRowJoiner joiner(StructType schema) {
      StructType appended = new StructType();
      for (int i = 0; i < APPENDED; i++) {
        appended = appended.add(names[inputs + i], DataTypes.LongType, true);
      }
      return GenerateUnsafeRowJoiner.create(schema, appended);
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
      /**
       * How many rows were added: each one's place, in its arrival column once the sort key (the
       * arrival time, whole) is taken from there.
       */
      private long added;
      /** The sort key of the row being added. */
      private long arrivalKey;
      /**
       * Two joiners, taken in turn, so that a row on its way out is a copy of the sorter's row
       * with the appended columns, in memory of its own: Spark projects a row it is given before
       * it asks for the next one, and the last row judged waits in the other joiner's.
       */
      private final UnsafeRowJoiner[] joiners;
      private int turn;
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
          String root = checkpoint.in(task) + "/" + directory;
          store = new SubstreamState(root, buckets, conf.value().value());
        } else {
          batchId = -1;
          store = null;
        }
        judged = rules.sorted(state, nowMs);
        int fields = schema.length();
        joiners = new UnsafeRowJoiner[] {joiner(schema), joiner(schema)};
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
       * in), then the order rows came in (merging what was spilled). Spark's sorters compare
       * records only where their prefixes are equal: here, by their places.
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
          return Long.compare(left.getLong(arrival), right.getLong(arrival));
        }
      }

      /** The sort prefix: the arrival time, whole, taken by {@link #add}. */
      private final class ArrivalPrefix extends UnsafeExternalRowSorter.PrefixComputer {
        private final Prefix prefix = new Prefix();

        @Override
        public Prefix computePrefix(InternalRow row) {
          prefix.value = arrivalKey;
          prefix.isNull = false;
          return prefix;
        }
      }

      /**
       * One row of the partition, into the sorter (copied there): its arrival (null as 0) is the
       * sort key, its arrival column (in {@code row}, which is marked) its place from then on.
       */
      void add(UnsafeRow row) throws IOException {
        arrivalKey = row.isNullAt(arrival) ? 0 : row.getLong(arrival);
        row.setLong(arrival, added++);
        sorter.insertRow(row);
      }

      /** The partition's rows, judged as they are taken; then what {@link #finish} adds. */
      Iterator<InternalRow> judged() throws IOException {
        scala.collection.Iterator<InternalRow> sorted = sorter.sort();
        return new Iterator<InternalRow>() {
          private InternalRow next;
          private Iterator<InternalRow> rest;

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
              InternalRow out = next;
              next = null;
              return out;
            }
            return rest.next();
          }
        };
      }

      /** Judges {@code row}; the row judged before it, or null (each a copy). */
      private InternalRow take(UnsafeRow row) throws IOException {
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
        UnsafeRow copy = joiners[turn].join(row, NOTHING);
        turn ^= 1;
        if (!copy.isNullAt(ts)) {
          copy.setLong(ts, judged.system);
        }
        setVerdict(copy, intVerdict, judged.verdict);
        if (judged.behind >= 0) {
          copy.setLong(inputs, judged.behind); // lateness
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
      private List<InternalRow> finish() throws IOException {
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
        List<InternalRow> out = new ArrayList<>(2);
        if (held != null) {
          // The partition's spread, on its last row; the columns are null on every other row.
          if (spread[0] != SubstreamRules.NONE) {
            held.setLong(inputs + 1, spread[0]); // slowest
            held.setLong(inputs + 2, spread[1]); // fastest
          }
          out.add(held);
        }
        if (synthetic != null) { // a heartbeat row carrying the moved clock
          beat.setLong(ts, synthetic[0]);
          setVerdict(beat, intVerdict, 0);
          beat.setLong(idle, synthetic[1]);
          out.add(joiners[turn].join(beat, NOTHING)); // the other joiner's row is held's
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
