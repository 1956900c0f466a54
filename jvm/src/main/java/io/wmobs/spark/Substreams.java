package io.wmobs.spark;

import static org.apache.spark.sql.functions.call_function;
import static org.apache.spark.sql.functions.coalesce;
import static org.apache.spark.sql.functions.col;
import static org.apache.spark.sql.functions.lit;
import static org.apache.spark.sql.functions.struct;
import static org.apache.spark.sql.functions.when;
import static org.apache.spark.sql.functions.xxhash64;

import com.fasterxml.jackson.databind.JsonNode;
import io.wmobs.spark.SubstreamBeans.In;
import io.wmobs.spark.SubstreamBeans.KeyState;
import io.wmobs.spark.SubstreamBeans.Out;
import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import org.apache.spark.api.java.function.FlatMapGroupsWithStateFunction;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.KeyValueGroupedDataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.streaming.GroupState;
import org.apache.spark.sql.streaming.GroupStateTimeout;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * Substreams in Spark's state store: each key's watermark kept by Spark's own stateful operator
 * ({@code flatMapGroupsWithState}; on Spark 4 with the RocksDB state store, {@code
 * transformWithState}: {@link KeyedState}), which Spark plans, checkpoints and reports like its
 * own (the progress' {@code stateOperators}, the Spark UI, the {@code statestore} reader). A
 * micro-batch reads and writes the state of the keys its rows touch, and nothing else: the
 * state store provider the query runs with (HDFS-backed, in executors' memory; RocksDB, off the
 * heap, with changelog checkpointing where configured) keeps the rest.
 *
 * <p>{@link #judge} plans it: the rows are hash-partitioned by key, and each key's rows reach
 * its judge ({@link KeyJudge}), which puts them in arrival order, then their place before the
 * shuffle ({@link KeyRows}; the input partition, then the place in it: {@link RowBytes#PLACE},
 * computed before the shuffle, which hands a partition's rows over in an order that changes
 * between attempts, so that every attempt judges ties in arrival alike). A row's columns
 * travel as one binary value ({@link RowBytes}), so the judge sees six fields of it, never its
 * columns. It judges each row against its key's
 * watermark ({@link SubstreamRules.Sorted}, the rule both engines answer to the reference cases
 * with), and with an idle timeout or a TTL, Spark's processing-time timeouts (or timers) call
 * it again for a key without rows: its idle clock moves on ({@link IdleClock}) and a synthetic
 * row carries it, or the key is forgotten.
 *
 * <p>Spec (JSON): {@code tolerance_us}, {@code drop}, {@code ttl_ms} and {@code idle_timeout_ms}
 * (null: none), {@code check_interval_ms} (how often an idle key's clock moves on), {@code
 * candidate_bits}, {@code ooo_bit}, the input's columns {@code key} (a long), {@code ts}, {@code
 * arrival}, {@code verdict}, {@code place} (a row's place before the shuffle) and {@code idle}
 * (null: no idle timeout), and {@code appended}: the names of the three columns the judge adds
 * (a row's lateness, and its key's largest system timestamp after the micro-batch twice, on its
 * last row: the smallest and largest of them are the batch's spread). The output: the input's columns without key, arrival and place, then
 * those three.
 */
public final class Substreams {
  /** The idle column of a real row (synthetic rows carry their firings, 0 or more). */
  static final long REAL = -1;

  private Substreams() {}

  /** The spec, parsed once: an unknown or missing member is an error naming it. */
  record Settings(
      long toleranceUs,
      boolean drop,
      long ttlMs,
      long idleTimeoutMs,
      long checkIntervalMs,
      long candidateBits,
      long oooBit,
      String key,
      String ts,
      String arrival,
      String verdict,
      String place,
      String idle,
      List<String> appended,
      String checkpoint,
      String files)
      implements Serializable {
    static final Set<String> MEMBERS =
        Set.of(
            "tolerance_us", "drop", "ttl_ms", "idle_timeout_ms", "check_interval_ms",
            "candidate_bits", "ooo_bit", "key", "ts", "arrival", "verdict", "place", "idle",
            "appended", "checkpoint", "files");
    /** Members a spec may have beyond those: the arguments' names of a call by name. */
    static final Set<String> OPTIONAL = Set.of("columns");

    static Settings parse(String text) {
      JsonNode spec;
      try {
        spec = Spec.JSON.readTree(text);
      } catch (IOException e) {
        throw new UncheckedIOException("wmobs: the substreams' spec is not JSON: " + text, e);
      }
      Spec.members("the substreams", spec, MEMBERS, OPTIONAL);
      Spec.Reader read = new Spec.Reader("the substreams", spec);
      List<String> appended = read.texts("appended");
      if (appended.size() != 3) {
        throw new IllegalArgumentException("wmobs: substreams append 3 columns, not " + appended);
      }
      return new Settings(
          read.integer("tolerance_us"),
          read.bool("drop"),
          read.integerOr("ttl_ms", -1),
          read.integerOr("idle_timeout_ms", -1),
          Math.max(1, read.integerOr("check_interval_ms", -1)),
          read.integer("candidate_bits"),
          read.integer("ooo_bit"),
          read.text("key"),
          read.text("ts"),
          read.text("arrival"),
          read.text("verdict"),
          read.text("place"),
          read.textOrNull("idle"),
          List.copyOf(appended),
          read.text("checkpoint"),
          read.text("files"));
    }

    boolean timeouts() {
      return ttlMs >= 0 || idleTimeoutMs >= 0;
    }

    SubstreamRules rules() {
      return new SubstreamRules(toleranceUs, drop, ttlMs, idleTimeoutMs, candidateBits, oooBit);
    }
  }

  /**
   * {@code staged} judged per key by the policy of {@code spec}: a plan with Spark's
   * flatMapGroupsWithState in it, which the query that runs it checkpoints.
   */
  public static Dataset<Row> judge(Dataset<Row> staged, String spec) {
    Settings settings = Settings.parse(spec);
    StructType schema = staged.schema();
    Set<String> passed = new TreeSet<>(List.of(settings.key, settings.ts, settings.arrival,
        settings.verdict, settings.place));
    if (settings.idle != null) {
      passed.add(settings.idle);
    }
    List<StructField> carried = new ArrayList<>();
    for (StructField field : schema.fields()) {
      if (!passed.contains(field.name())) {
        carried.add(field);
      }
    }
    for (String name : passed) {
      schema.apply(name); // an error naming it, where it is missing
    }
    StructType rowSchema = new StructType(carried.toArray(new StructField[0]));
    Column[] rowColumns = carried.stream().map(f -> named(f.name())).toArray(Column[]::new);
    Dataset<Row> packed =
        staged.select(
            named(settings.key).as("key"),
            named(settings.ts).as("ts"),
            coalesce(named(settings.arrival), lit(0L)).as("arrival"),
            named(settings.place).as("seq"),
            named(settings.verdict).cast(DataTypes.LongType).as("verdict"),
            (settings.idle == null ? lit(REAL) : named(settings.idle))
                .cast(DataTypes.LongType)
                .as("idle"),
            call_function(RowBytes.PACK, lit(settings.files), struct(rowColumns)).as("row"));
    KeyJudge judge =
        new KeyJudge(settings, RowBytes.placeholder(rowSchema), Legacy.onDriver(settings));
    KeyValueGroupedDataset<Long, In> grouped =
        packed.groupBy(col("key")).as(Encoders.LONG(), Encoders.bean(In.class));
    Dataset<Out> judged =
        KeyedState.chosen(staged.sparkSession())
            ? KeyedState.judge(grouped, judge, settings.timeouts())
            : grouped.flatMapGroupsWithState(
                new Judge(judge),
                OutputMode.Append(),
                Encoders.bean(KeyState.class),
                Encoders.bean(Out.class),
                settings.timeouts()
                    ? GroupStateTimeout.ProcessingTimeTimeout()
                    : GroupStateTimeout.NoTimeout());
    Column row = call_function(RowBytes.UNPACK, lit(rowSchema.json()), col("row"));
    List<Column> output = new ArrayList<>();
    for (StructField field : output(schema, settings).fields()) {
      String name = field.name();
      Column value;
      if (name.equals(settings.ts)) {
        value = col("ts");
      } else if (name.equals(settings.verdict)) {
        value = col("verdict").cast(field.dataType());
      } else if (name.equals(settings.idle)) {
        value = col("idle").cast(field.dataType());
      } else if (settings.appended.contains(name)) {
        value = col(APPENDED.get(settings.appended.indexOf(name)));
      } else {
        value = row.getField(name);
      }
      output.add(value.as(name));
    }
    return judged.select(output.toArray(new Column[0]));
  }

  /**
   * A row's key: the hash of its key columns and, where some are null, which ones (Spark's
   * hash skips a null, so {@code (7, null)} and {@code (null, 7)} would share a key). A key
   * without nulls hashes as its columns alone, as before that was added.
   */
  static Column key(List<String> columns) {
    Column nulls = lit(0L);
    List<Column> hashed = new ArrayList<>();
    for (int i = 0; i < columns.size(); i++) {
      Column column = named(columns.get(i));
      hashed.add(column);
      nulls = nulls.plus(when(column.isNull(), lit(1L << Math.min(i, 62))).otherwise(lit(0L)));
    }
    hashed.add(when(nulls.notEqual(lit(0L)), nulls));
    return xxhash64(hashed.toArray(new Column[0]));
  }

  /** The judge's output fields for the appended columns, in order. */
  private static final List<String> APPENDED = List.of("lateness", "slowest", "fastest");

  /**
   * The schema of what {@link #judge} makes of rows of {@code input}: its columns without key
   * and arrival, then the three appended ones.
   */
  static StructType output(StructType input, Settings settings) {
    List<StructField> fields = new ArrayList<>();
    for (StructField field : input.fields()) {
      String name = field.name();
      if (name.equals(settings.key)
          || name.equals(settings.arrival)
          || name.equals(settings.place)) {
        continue;
      }
      if (name.equals(settings.ts)) {
        fields.add(new StructField(name, DataTypes.LongType, true, Metadata.empty()));
      } else if (name.equals(settings.verdict) || name.equals(settings.idle)) {
        fields.add(new StructField(name, field.dataType(), false, Metadata.empty()));
      } else {
        fields.add(field);
      }
    }
    for (String name : settings.appended) {
      fields.add(new StructField(name, DataTypes.LongType, true, Metadata.empty()));
    }
    return new StructType(fields.toArray(new StructField[0]));
  }

  private static Column named(String name) {
    return col("`" + name.replace("`", "``") + "`");
  }

  /** {@code flatMapGroupsWithState}'s state function: the key's judge over its group state. */
  static final class Judge implements FlatMapGroupsWithStateFunction<Long, In, KeyState, Out> {
    private static final long serialVersionUID = 1L;
    private final KeyJudge judge;

    Judge(KeyJudge judge) {
      this.judge = judge;
    }

    @Override
    public Iterator<Out> call(Long key, Iterator<In> rows, GroupState<KeyState> state) {
      KeyJudge.Store store =
          new KeyJudge.Store() {
            @Override
            public long now() {
              return state.getCurrentProcessingTimeMs();
            }

            @Override
            public KeyState get() {
              return state.exists() ? state.get() : null;
            }

            @Override
            public void keep(KeyState value, long dueMs) {
              state.update(value);
              if (dueMs >= 0) {
                state.setTimeoutDuration(dueMs - now());
              }
            }

            @Override
            public void remove() {
              state.remove();
            }
          };
      return state.hasTimedOut() ? judge.timedOut(store) : judge.rows(key, rows, store);
    }
  }

  /**
   * The per-key state files of wmobs 0.2 (and of the Python engine) below the query's
   * checkpoint: Spark's state store cannot take them over, so a query that finds them stops
   * with an error that says what to do, rather than start every key's watermark afresh
   * unseen. Looked for once per executor and query.
   */
  record Legacy(
      Hadoop.Checkpoint checkpoint,
      String files,
      org.apache.spark.broadcast.Broadcast<org.apache.spark.util.SerializableConfiguration> conf)
      implements Serializable {
    private static final Set<String> ABSENT = java.util.concurrent.ConcurrentHashMap.newKeySet();

    static Legacy onDriver(Settings settings) {
      return new Legacy(
          Hadoop.Checkpoint.onDriver(settings.checkpoint), settings.files, Hadoop.sessionConf());
    }

    void check() {
      org.apache.spark.TaskContext task = org.apache.spark.TaskContext.get();
      if (task == null
          || (checkpoint.configured().isEmpty()
              && task.getLocalProperty(MicroBatch.QUERY_ID) == null)) {
        // No checkpoint known here (a foreachBatch function's job over Spark Connect):
        // QueryCheckpoint looked as it planned the micro-batch.
        return;
      }
      String root = checkpoint.in(task) + "/" + files;
      String key = root + "\n" + task.getLocalProperty("sql.streaming.queryId");
      if (ABSENT.contains(key)) {
        return;
      }
      org.apache.hadoop.fs.Path path = new org.apache.hadoop.fs.Path(root);
      boolean found;
      try {
        found = path.getFileSystem(conf.value().value()).exists(path);
      } catch (IOException e) {
        throw new UncheckedIOException("wmobs: could not look for " + root, e);
      }
      if (found) {
        throw new IllegalStateException(message(root));
      }
      ABSENT.add(key);
    }

    /** What a query on a checkpoint with the per-key state files of wmobs 0.2 is told. */
    static String message(String root) {
      return "wmobs: the checkpoint holds substreams' per-key state as wmobs 0.2 (or the Python"
          + " engine) kept it, in " + root + "; the JVM engine keeps it in Spark's state store,"
          + " in a stateful operator that Spark cannot add to a checkpoint that ran without it."
          + " To keep the keys' watermarks, run this checkpoint where it ran (wmobs 0.2, or"
          + " engine=\"python\" on Spark 4.0 or later); to go on with the JVM engine, start"
          + " the query on a new checkpoint (every key's watermark starts afresh).";
    }
  }
}
