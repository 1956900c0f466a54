package io.wmobs.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.IdentityHashMap;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.UUID;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.spark.SparkContext;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;

/**
 * Where the running streaming query keeps its checkpoint, told to its tasks: an optimizer rule
 * of the extension that changes no plan's meaning (it tells wmobs' functions in it their
 * micro-batch, below). Spark optimizes each micro-batch's plan on the query's
 * own thread, which carries the query's id ({@code sql.streaming.queryId}) as a local property
 * that every task of the micro-batch inherits; the rule adds the query's resolved checkpoint
 * root beside it ({@link #ROOT}, with {@link #QUERY} naming the query it belongs to). wmobs'
 * functions then find the checkpoint of the query they run in where none was given ({@link
 * Hadoop.Checkpoint}): a query with its own {@code checkpointLocation} that is not below the
 * session's root, one started by Spark Declarative Pipelines under the pipeline's storage, a
 * policy from SQL. Looked up once per query and thread.
 *
 * <p>It also tells the tasks the micro-batch's watermark and time ({@link #WATERMARK}, {@link
 * #TIMESTAMP}, with {@link #BATCH} naming the micro-batch): Spark fixes both ({@code
 * StreamExecution.offsetSeqMetadata}) before it plans the micro-batch, and writes them to the
 * offsets log, which {@link BatchTimes} reads where these are missing. In real-time mode (Spark
 * 4.1+) the offsets log is written only when the real-time batch ends, so there these are the
 * only way; elsewhere they save every executor a read of the checkpoint per micro-batch.
 *
 * <p>And it tells wmobs' functions in the micro-batch's plan the same ({@link MicroBatch}): a
 * task inherits local properties from the thread whose job it runs, which for the actions of a
 * {@code foreachBatch} function over Spark Connect is not the query's.
 */
public final class QueryCheckpoint extends Rule<LogicalPlan> {
  static final String ROOT = "wmobs.checkpoint.root";
  static final String QUERY = "wmobs.checkpoint.query";
  /** The micro-batch whose watermark and time {@link #WATERMARK} and {@link #TIMESTAMP} are. */
  static final String BATCH = "wmobs.batch.id";
  /** The query whose micro-batch {@link #BATCH} is. */
  static final String BATCH_QUERY = "wmobs.batch.query";
  /** The running micro-batch's watermark, ms ("" before the first one). */
  static final String WATERMARK = "wmobs.batch.watermarkMs";
  /** The running micro-batch's time, ms. */
  static final String TIMESTAMP = "wmobs.batch.timestampMs";
  /** The run of the query whose micro-batch {@link #BATCH} is. */
  static final String RUN = "wmobs.batch.run";

  private final SparkSession spark;

  public QueryCheckpoint(SparkSession spark) {
    this.spark = spark;
  }

  @Override
  public LogicalPlan apply(LogicalPlan plan) {
    String refused = null;
    try {
      refused = tell(spark.sparkContext(), plan);
    } catch (RuntimeException | ReflectiveOperationException e) {
      // A query whose checkpoint is not found here is told to pass it (Hadoop.HINT).
    }
    if (refused != null) {
      throw new IllegalStateException(refused);
    }
    MicroBatch batch = MicroBatch.onThisThread(spark);
    return batch == null ? plan : told(plan, batch);
  }

  /**
   * {@code plan}, its wmobs functions told the micro-batch it is planned for: a function used
   * in several places stays one (Catalyst matches wmobs' functions by identity).
   */
  static LogicalPlan told(LogicalPlan plan, MicroBatch batch) {
    Map<Expression, Expression> done = new IdentityHashMap<>();
    return (LogicalPlan)
        plan.transformAllExpressions(
            new scala.runtime.AbstractPartialFunction<Expression, Expression>() {
              @Override
              public boolean isDefinedAt(Expression e) {
                return e instanceof MicroBatch.Told;
              }

              @Override
              public Expression apply(Expression e) {
                return done.computeIfAbsent(e, f -> ((MicroBatch.Told) f).told(batch));
              }
            });
  }

  /** What stops the query (a time policy that real-time mode cannot run), or null. */
  private String tell(SparkContext context, LogicalPlan plan) throws ReflectiveOperationException {
    String id = context.getLocalProperty("sql.streaming.queryId");
    if (id == null) {
      return null;
    }
    String batch = context.getLocalProperty("streaming.sql.batchId");
    boolean checkpointKnown = id.equals(context.getLocalProperty(QUERY));
    // Once per micro-batch: Spark sets its id before it plans it, after it fixed its times.
    boolean timesKnown =
        batch == null
            || (batch.equals(context.getLocalProperty(BATCH))
                && id.equals(context.getLocalProperty(BATCH_QUERY)));
    if (checkpointKnown && timesKnown) {
      return null;
    }
    Object execution = execution(id);
    if (execution == null) {
      return null;
    }
    String refused = null;
    if (!timesKnown) {
      tellTimes(context, execution, id, batch);
      refused = RealTimeMode.refused(execution, plan);
    }
    if (!checkpointKnown) {
      Object root = execution.getClass().getMethod("resolvedCheckpointRoot").invoke(execution);
      if (root instanceof String found && !found.isEmpty()) {
        String refusedHere = substreamsRefused(plan, found);
        if (refusedHere != null) { // before Spark looks for the operator's state, and fails
          return refusedHere;
        }
        context.setLocalProperty(ROOT, found);
        context.setLocalProperty(QUERY, id);
      }
    }
    return refused;
  }

  /**
   * Why substreams that {@code plan} keeps in Spark's state store (found by their {@link
   * RowBytes.Pack}) cannot run on the checkpoint at {@code root}, or null: their operator
   * planned in {@code transformWithState} where Spark restored another state store provider
   * than RocksDB from the checkpoint; or the checkpoint has per-key state files of wmobs 0.2
   * or of the Python engine in their Pack's folder ({@link Substreams.Legacy#message}). Such
   * a query stops as it plans its first micro-batch, before Spark finds its operator's state
   * missing or of another kind and stops it with an error of its own.
   */
  private String substreamsRefused(LogicalPlan plan, String root) {
    Set<String> folders = new TreeSet<>();
    Set<String> operators = new TreeSet<>();
    packed(plan, folders, operators);
    if (folders.isEmpty()) {
      return null;
    }
    String restored = KeyedState.plannedForAnotherStore(operators);
    if (restored != null) {
      return restored;
    }
    Configuration hadoop = spark.sessionState().newHadoopConf();
    for (String folder : folders) {
      Path path = new Path(root + "/" + folder);
      try {
        if (path.getFileSystem(hadoop).exists(path)) {
          return Substreams.Legacy.message(path.toString());
        }
      } catch (IOException e) {
        throw new UncheckedIOException(e); // the tasks look again (Substreams.Legacy)
      }
    }
    return null;
  }

  /** The folders of the plan's {@link RowBytes.Pack}s, and the names of its operators. */
  private static void packed(LogicalPlan plan, Set<String> folders, Set<String> operators) {
    operators.add(plan.getClass().getSimpleName());
    for (Expression e : Scala.list(plan.expressions())) {
      packed(e, folders);
    }
    for (LogicalPlan child : Scala.list(plan.children())) {
      packed(child, folders, operators);
    }
  }

  private static void packed(Expression e, Set<String> folders) {
    if (e instanceof RowBytes.Pack pack && !pack.folder().isEmpty()) {
      folders.add(pack.folder());
    }
    for (Expression child : Scala.list(e.children())) {
      packed(child, folders);
    }
  }

  /** The micro-batch's watermark and time, from where Spark fixed them before planning it. */
  private static void tellTimes(SparkContext context, Object execution, String id, String batch)
      throws ReflectiveOperationException {
    Object metadata;
    try { // Spark 4: the execution context of the micro-batch being planned
      Object context_ = execution.getClass().getMethod("getLatestExecutionContext").invoke(execution);
      Object planned = context_.getClass().getMethod("batchId").invoke(context_);
      if (!batch.equals(String.valueOf(planned))) {
        return; // not the one planned now: the tasks read the offsets log
      }
      metadata = context_.getClass().getMethod("offsetSeqMetadata").invoke(context_);
    } catch (NoSuchMethodException e) { // Spark 3.5: the query's own
      metadata = execution.getClass().getMethod("offsetSeqMetadata").invoke(execution);
    }
    Class<?> type = metadata.getClass();
    long watermark = ((Number) type.getMethod("batchWatermarkMs").invoke(metadata)).longValue();
    long timestamp = ((Number) type.getMethod("batchTimestampMs").invoke(metadata)).longValue();
    context.setLocalProperty(WATERMARK, watermark > 0 ? Long.toString(watermark) : "");
    context.setLocalProperty(TIMESTAMP, Long.toString(timestamp));
    context.setLocalProperty(BATCH, batch);
    context.setLocalProperty(BATCH_QUERY, id);
    Object run = execution.getClass().getMethod("runId").invoke(execution);
    context.setLocalProperty(RUN, String.valueOf(run));
  }

  /**
   * The running query's {@code StreamExecution}: from the session's query manager
   * ({@code StreamingQueryWrapper.streamingQuery()}), or where the query was started from
   * another session (Spark Declarative Pipelines start flows so) from the query's own thread,
   * which Spark makes inside its {@code StreamExecution} (Scala's {@code $outer}); by name, in
   * whichever package this Spark line keeps them.
   */
  private Object execution(String id) throws ReflectiveOperationException {
    Object query = spark.streams().get(UUID.fromString(id));
    if (query != null) {
      return query.getClass().getMethod("streamingQuery").invoke(query);
    }
    for (Class<?> type = Thread.currentThread().getClass(); type != null;
        type = type.getSuperclass()) {
      for (java.lang.reflect.Field field : type.getDeclaredFields()) {
        if (field.getName().equals("$outer")) {
          field.setAccessible(true);
          Object outer = field.get(Thread.currentThread());
          Object found = outer.getClass().getMethod("id").invoke(outer);
          return id.equals(String.valueOf(found)) ? outer : null;
        }
      }
    }
    return null;
  }
}
