package io.wmobs.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.NoSuchFileException;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.UnaryOperator;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.spark.TaskContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeBlock;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.catalyst.expressions.codegen.JavaCode;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.util.SerializableConfiguration;

/**
 * The watermark or the timestamp of the running micro-batch: {@code
 * wmobs_batch_watermark(checkpoint)} and {@code wmobs_batch_timestamp(checkpoint)} (ms; the
 * watermark null before the first one; {@code checkpoint}: the query's checkpoint location, or
 * "" to find a named query's). wmobs' global time policy judges every row against them.
 *
 * <p>Spark fixes both before it plans the micro-batch; the extension's {@link QueryCheckpoint}
 * rule gives them to every task as local properties (in real-time mode the only way: Spark
 * writes them to the checkpoint only when the real-time batch ends), and to the function
 * itself as it plans the micro-batch ({@link MicroBatch}), for tasks that run on another
 * thread's job (a {@code foreachBatch} function's over Spark Connect). Where those are missing,
 * they come from the query's checkpoint ({@code offsets/<batchId>}), which Spark writes before
 * a micro-batch runs: each task reads them once (each executor once per micro-batch, through a
 * small cache) with the session's Hadoop configuration, the one Spark wrote the checkpoint with. This replaces a
 * one-row Python data source broadcast into the plan, which cost a Spark job of its own per
 * micro-batch. Mirrors {@code wmobs/policy/_python/_checkpoint.py}, the Python engine's reader.
 *
 * <p>Each function is a Catalyst expression ({@link Time}), not a UDF: a UDF's generated code
 * calls it on every row, which looks the task up, boxes the value and converts it; the
 * expression's generated code asks once per task and reads a field on every row.
 */
public final class BatchTimes implements Serializable {
  private static final long serialVersionUID = 1L;
  private static final ObjectMapper JSON = new ObjectMapper();
  /** (checkpoint, batch id, query id) -> {watermark or Long.MIN_VALUE for none, timestamp}. */
  private static final Map<String, long[]> READ = new ConcurrentHashMap<>();

  private final Hadoop.Checkpoint checkpoint;
  private final boolean watermark;
  /** The session's Hadoop configuration, broadcast once: every executor fetches it once. */
  private final Broadcast<SerializableConfiguration> conf;
  /** The micro-batch it was planned for, or null: the task's own local properties. */
  private final MicroBatch told;

  // The value for the task that last called (deserialized: known = false).
  private transient boolean known;
  private transient long taskAttempt;
  private transient Long value;

  BatchTimes(
      Hadoop.Checkpoint checkpoint,
      boolean watermark,
      Broadcast<SerializableConfiguration> conf,
      MicroBatch told) {
    this.checkpoint = checkpoint;
    this.watermark = watermark;
    this.conf = conf;
    this.told = told;
  }

  /** The function {@code name}: the watermark if {@code watermark}, else the timestamp. */
  static Expression build(String name, boolean watermark, List<Expression> arguments) {
    Spec.arity(name, arguments, 1);
    Hadoop.Checkpoint checkpoint = Hadoop.Checkpoint.onDriver(Spec.text(name, arguments));
    return new Time(new BatchTimes(checkpoint, watermark, Hadoop.sessionConf(), null), name);
  }

  /** The value for the running task: null for no watermark (yet). */
  public Long call() {
    TaskContext task = TaskContext.get();
    if (task == null) {
      throw new IllegalStateException(
          "wmobs: the batch watermark is only known inside a streaming micro-batch's task");
    }
    if (!known || task.taskAttemptId() != taskAttempt) {
      try {
        value = lookUp(task);
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
      taskAttempt = task.taskAttemptId();
      known = true;
    }
    return value;
  }

  private Long lookUp(TaskContext task) throws IOException {
    long[] times = of(checkpoint, MicroBatch.of(told, task), conf.value().value());
    long found = watermark ? times[0] : times[1];
    return found == Long.MIN_VALUE ? null : found;
  }

  /**
   * The running micro-batch's {watermark, timestamp} (ms; {@code Long.MIN_VALUE} for none),
   * as the task's micro-batch {@code property} says ({@link MicroBatch#of}), else read once
   * per executor from {@code offsets/<batchId>} of the query's {@code checkpoint}, which must
   * be the running query's.
   */
  static long[] of(
      Hadoop.Checkpoint checkpoint, UnaryOperator<String> property, Configuration hadoop)
      throws IOException {
    String batch = property.apply(MicroBatch.BATCH_ID);
    if (batch == null) {
      throw new IllegalStateException(
          "wmobs: the batch watermark is only known inside a streaming micro-batch, and this"
              + " task ran without its micro-batch: its plan was not planned by a streaming"
              + " query (with wmobs' extension in the session)");
    }
    String queryId = property.apply(MicroBatch.QUERY_ID);
    long[] told = toldByRule(property, batch, queryId);
    if (told != null) {
      if (!checkpoint.configured().isEmpty()) {
        ownedBy(checkpoint.configured(), queryId, hadoop); // what it keeps there is the query's
      }
      return told;
    }
    String base = checkpoint.in(property);
    String key = base + "\n" + batch + "\n" + queryId; // checked once per key
    long[] times = READ.get(key);
    if (times == null) {
      times = read(base, Long.parseLong(batch), queryId, hadoop);
      if (READ.size() > 256) {
        READ.clear();
      }
      READ.put(key, times);
    }
    return times;
  }

  /**
   * The micro-batch's {watermark, timestamp} as the extension's {@link QueryCheckpoint} rule
   * told the tasks when Spark planned it, if it told them for this query's micro-batch.
   */
  static long[] toldByRule(UnaryOperator<String> property, String batch, String queryId) {
    String timestamp = property.apply(QueryCheckpoint.TIMESTAMP);
    if (timestamp == null
        || queryId == null
        || !batch.equals(property.apply(QueryCheckpoint.BATCH))
        || !queryId.equals(property.apply(QueryCheckpoint.BATCH_QUERY))) {
      return null;
    }
    String watermark = property.apply(QueryCheckpoint.WATERMARK);
    return new long[] {
      watermark == null || watermark.isEmpty() ? Long.MIN_VALUE : Long.parseLong(watermark),
      Long.parseLong(timestamp)
    };
  }

  /** (checkpoint, query id) pairs this executor checked: a query's checkpoint stays its own. */
  private static final Set<String> OWNED = ConcurrentHashMap.newKeySet();

  /**
   * Fails unless the checkpoint at {@code base} is query {@code queryId}'s (its {@code metadata}
   * file names it), read once per executor and query: a {@code checkpoint_location} that names
   * another query's checkpoint fails the first micro-batch rather than mix the two queries'
   * kept counts and dead letters.
   */
  static void ownedBy(String base, String queryId, Configuration hadoop) throws IOException {
    String key = base + "\n" + queryId;
    if (queryId == null || OWNED.contains(key)) {
      return;
    }
    String id;
    try {
      id = JSON.readTree(readText(base + "/metadata", hadoop)).path("id").asText(null);
    } catch (IOException e) {
      throw new IOException(
          "wmobs TimePolicy could not read the checkpoint '" + base + "' (" + e + "). "
              + Hadoop.HINT,
          e);
    }
    if (!queryId.equals(id)) {
      throw new IllegalStateException(
          base + " is the checkpoint of query " + id + ", not of " + queryId);
    }
    OWNED.add(key);
  }

  private static long[] read(String base, long batch, String queryId, Configuration hadoop)
      throws IOException {
    ownedBy(base, queryId, hadoop);
    try {
      String offsets;
      try {
        offsets = readText(base + "/offsets/" + batch, hadoop);
      } catch (FileNotFoundException | NoSuchFileException e) {
        if (queryId == null) { // perhaps not the query's checkpoint: the hint below
          throw e;
        }
        throw new IllegalStateException(noOffsetsEntry(base, batch, queryId), e);
      }
      List<String> lines = offsets.lines().toList();
      if (lines.size() < 2) {
        throw new IOException("incomplete offsets file (being written?)");
      }
      JsonNode metadata = JSON.readTree(lines.get(1));
      long mark = metadata.path("batchWatermarkMs").asLong(0);
      JsonNode timestamp = metadata.get("batchTimestampMs");
      return new long[] {
        mark > 0 ? mark : Long.MIN_VALUE,
        timestamp == null || timestamp.isNull() ? Long.MIN_VALUE : timestamp.asLong()
      };
    } catch (IOException e) {
      throw new IOException(
          "wmobs TimePolicy could not read the watermark of batch " + batch
              + " from the checkpoint '" + base + "' (" + e + "). " + Hadoop.HINT,
          e);
    }
  }

  /**
   * Why the offsets log of the query's own checkpoint lacks a micro-batch (the Python engine
   * says the same, {@code _checkpoint.no_offsets_entry}).
   */
  static String noOffsetsEntry(String base, long batch, String queryId) {
    return "wmobs TimePolicy: the offsets log of query " + queryId + " in '" + base
        + "' has no entry for batch " + batch + ". Spark writes it before each micro-batch"
        + " runs, unless the query tracks its progress asynchronously (the writeStream option"
        + " asyncProgressTrackingEnabled), which writes it late or not at all; time policies"
        + " read each micro-batch's watermark and time from it: turn asynchronous progress"
        + " tracking off for this query";
  }

  static String readText(String path, Configuration hadoop) throws IOException {
    return new String(Hadoop.read(new Path(path), hadoop), StandardCharsets.UTF_8);
  }

  /**
   * One of the functions as Spark evaluates it. Its generated code reads the value once per
   * instance of the generated class (Spark makes one per task, and initializes it for its
   * partition) into fields; evaluated without generated code, it asks {@link BatchTimes#call}
   * (cached per task attempt).
   */
  public static final class Time extends WmobsExpression
      implements Serializable, MicroBatch.Told {
    private static final long serialVersionUID = 1L;
    private final BatchTimes function;
    private final String name;

    public Time(BatchTimes function, String name) {
      this.function = function;
      this.name = name;
    }

    @Override
    public Object eval(InternalRow row) {
      return function.call();
    }

    @Override
    public Expression told(MicroBatch batch) {
      if (batch.equals(function.told)) {
        return this;
      }
      return new Time(
          new BatchTimes(function.checkpoint, function.watermark, function.conf, batch), name);
    }

    @Override
    public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
      String reference = ctx.addReferenceObj("wmobsBatchTimes", function, BatchTimes.class.getName());
      String known = ctx.addMutableState("boolean", "wmobsKnown", v -> "", true, true);
      String isNull = ctx.addMutableState("boolean", "wmobsIsNull", v -> "", true, true);
      String value = ctx.addMutableState("long", "wmobsValue", v -> "", true, true);
      // Spark makes an instance per task; one that it initializes for another asks again.
      ctx.addPartitionInitializationStatement(known + " = false;");
      String code =
          "if (!" + known + ") {\n"
              + "  java.lang.Long found = " + reference + ".call();\n"
              + "  " + isNull + " = found == null;\n"
              + "  " + value + " = found == null ? -1L : found.longValue();\n"
              + "  " + known + " = true;\n"
              + "}";
      return ExprCode.apply(
          new CodeBlock(Scala.seq(List.of(code)), Scala.seq(List.<JavaCode>of())),
          JavaCode.isNullGlobal(isNull),
          JavaCode.global(value, DataTypes.LongType));
    }

    @Override
    protected List<Expression> arguments() {
      return List.of();
    }

    @Override
    protected Expression withArguments(List<Expression> arguments) {
      return this;
    }

    @Override
    protected List<Object> fields() {
      return List.of(function, name);
    }

    @Override
    public boolean nullable() {
      return true;
    }

    @Override
    public DataType dataType() {
      return DataTypes.LongType;
    }

    @Override
    public String prettyName() {
      return name;
    }

    @Override
    public String toString() {
      return name + "()";
    }
  }
}
