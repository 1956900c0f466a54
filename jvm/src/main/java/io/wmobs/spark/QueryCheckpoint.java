package io.wmobs.spark;

import java.util.UUID;
import org.apache.spark.SparkContext;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;

/**
 * Where the running streaming query keeps its checkpoint, told to its tasks: an optimizer rule
 * of the extension that changes no plan. Spark optimizes each micro-batch's plan on the query's
 * own thread, which carries the query's id ({@code sql.streaming.queryId}) as a local property
 * that every task of the micro-batch inherits; the rule adds the query's resolved checkpoint
 * root beside it ({@link #ROOT}, with {@link #QUERY} naming the query it belongs to). wmobs'
 * functions then find the checkpoint of the query they run in where none was given ({@link
 * Hadoop.Checkpoint}): a query with its own {@code checkpointLocation} that is not below the
 * session's root, one started by Spark Declarative Pipelines under the pipeline's storage, a
 * policy from SQL. Looked up once per query and thread.
 */
public final class QueryCheckpoint extends Rule<LogicalPlan> {
  static final String ROOT = "wmobs.checkpoint.root";
  static final String QUERY = "wmobs.checkpoint.query";

  private final SparkSession spark;

  public QueryCheckpoint(SparkSession spark) {
    this.spark = spark;
  }

  @Override
  public LogicalPlan apply(LogicalPlan plan) {
    try {
      tell(spark.sparkContext());
    } catch (RuntimeException | ReflectiveOperationException e) {
      // A query whose checkpoint is not found here is told to pass it (Hadoop.HINT).
    }
    return plan;
  }

  private void tell(SparkContext context) throws ReflectiveOperationException {
    String id = context.getLocalProperty("sql.streaming.queryId");
    if (id == null || id.equals(context.getLocalProperty(QUERY))) {
      return;
    }
    Object execution = execution(id);
    if (execution == null) {
      return;
    }
    Object root = execution.getClass().getMethod("resolvedCheckpointRoot").invoke(execution);
    if (root instanceof String found && !found.isEmpty()) {
      context.setLocalProperty(ROOT, found);
      context.setLocalProperty(QUERY, id);
    }
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
