package io.wmobs.spark;

import java.io.Serializable;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.UnaryOperator;
import org.apache.spark.SparkContext;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.Expression;

/**
 * The micro-batch a plan was planned for: the local properties that Spark and the extension's
 * {@link QueryCheckpoint} rule set on a streaming query's thread as it plans a micro-batch (the
 * micro-batch's id, the query's id, run and checkpoint, the micro-batch's watermark and time),
 * taken there by the rule and carried by wmobs' expressions ({@link Told}) to their tasks.
 *
 * <p>A task inherits local properties from the thread that runs its job: the query's own for a
 * sink, but another for the actions of a {@code foreachBatch} function over Spark Connect (the
 * server runs them on a thread of its own, for the function's Python process) or on a thread
 * the function starts. Their plan is the micro-batch's, planned on the query's thread, so its
 * expressions know the micro-batch wherever its tasks run.
 */
record MicroBatch(Map<String, String> properties) implements Serializable {
  static final String QUERY_ID = "sql.streaming.queryId";
  static final String BATCH_ID = "streaming.sql.batchId";
  /** Every property a wmobs task reads (the named query's checkpoint root among them). */
  private static final List<String> NAMES =
      List.of(
          QUERY_ID,
          BATCH_ID,
          "spark.sql.streaming.checkpointLocation",
          "spark.job.description",
          QueryCheckpoint.ROOT,
          QueryCheckpoint.QUERY,
          QueryCheckpoint.BATCH,
          QueryCheckpoint.BATCH_QUERY,
          QueryCheckpoint.WATERMARK,
          QueryCheckpoint.TIMESTAMP,
          QueryCheckpoint.RUN);

  /** An expression that takes the micro-batch it was planned for. */
  interface Told {
    /** The same expression, its tasks told {@code batch} (this one where it was already). */
    Expression told(MicroBatch batch);
  }

  /** The micro-batch planned on this thread (its active session's), or null where none is. */
  static MicroBatch onThisThread() {
    scala.Option<SparkSession> session = SparkSession.getActiveSession();
    return session.isEmpty() ? null : onThisThread(session.get());
  }

  /**
   * The micro-batch planned on this thread, or null where none is. The session's settings
   * (the checkpoint root) are local properties only while a job runs: read from the session.
   */
  static MicroBatch onThisThread(SparkSession spark) {
    SparkContext context = spark.sparkContext();
    if (context.getLocalProperty(BATCH_ID) == null
        || context.getLocalProperty(QUERY_ID) == null) {
      return null;
    }
    Map<String, String> found = new TreeMap<>();
    for (String name : NAMES) {
      String value = context.getLocalProperty(name);
      if (value == null && name.startsWith("spark.sql.")) {
        value = spark.conf().get(name, null);
      }
      if (value != null) {
        found.put(name, value);
      }
    }
    return new MicroBatch(found);
  }

  /**
   * The properties a task reads: those of the micro-batch it was told, else (for one it was
   * not told of, or with no micro-batch told) its own.
   */
  static UnaryOperator<String> of(MicroBatch told, TaskContext task) {
    if (told == null) {
      return task::getLocalProperty;
    }
    return name -> {
      String value = told.properties.get(name);
      return value != null || task == null ? value : task.getLocalProperty(name);
    };
  }
}
