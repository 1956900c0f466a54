package io.wmobs.spark;

import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;

/**
 * Spark's real-time mode (Spark 4.1+, {@code trigger(realTime=...)}): what a time policy can do
 * there, and what it cannot, said when the query plans its first real-time batch, before Spark's
 * own check of the plan names an operator the user never wrote.
 *
 * <p>A real-time batch runs one long job over an interval; Spark runs only the operators of its
 * allowlist there (projections, filters, generators, {@code observe}, unions, broadcast joins).
 * A global time policy on the JVM engine is made of those, and reads the batch's watermark and
 * time from the local properties {@link QueryCheckpoint} sets (the offsets log is written only
 * when a real-time batch ends). Substreams keep per-key state in {@code flatMapGroupsWithState},
 * which no real-time line allows; the idle timeout unions in a heartbeat source, and real-time
 * mode reads only sources that support it (Kafka's); the Python engine reads the watermark
 * through a broadcast nested-loop join and runs pandas UDFs, neither allowed.
 */
final class RealTimeMode {
  private RealTimeMode() {}

  /** The plan's substreams, by the state function's output class in its tree. */
  static final String SUBSTREAMS = Substreams.Out.class.getName();
  /** The idle timeout's heartbeat source (both engines name it so). */
  static final String HEARTBEAT = "wmobs_idle_heartbeat";
  /** The Python engine's source of the batch watermark. */
  static final String PYTHON_ENGINE = "wmobs_batch_watermark";

  /** Whether {@code execution} (a {@code StreamExecution}) runs a real-time trigger. */
  static boolean of(Object execution) throws ReflectiveOperationException {
    Object trigger = execution.getClass().getMethod("trigger").invoke(execution);
    return trigger != null && trigger.getClass().getSimpleName().equals("RealTimeTrigger");
  }

  /** Why a real-time query cannot run {@code plan}'s time policy, or null if it can. */
  static String refused(Object execution, LogicalPlan plan) throws ReflectiveOperationException {
    if (!of(execution)) {
      return null;
    }
    String tree = plan.treeString();
    String what;
    if (tree.contains(PYTHON_ENGINE)) {
      what = "runs on the Python engine, whose plan real-time mode does not allow (a broadcast"
          + " nested-loop join and pandas UDFs): apply it with engine=\"jvm\" (wmobs' Spark"
          + " extension, wmobs.configure_spark)";
    } else if (tree.contains(SUBSTREAMS)) {
      what = "has substream_by: substreams keep a watermark per key in Spark's state store"
          + " (flatMapGroupsWithState), which real-time mode does not allow; use a global policy"
          + " in real-time mode, or a micro-batch trigger for substreams";
    } else if (tree.contains(HEARTBEAT)) {
      what = "has an idle timeout: its heartbeat is a source of its own, and real-time mode reads"
          + " only sources that support it (Kafka); use a micro-batch trigger for an idle timeout";
    } else {
      return null;
    }
    return "wmobs TimePolicy in real-time mode (trigger(realTime=...)): this query's policy "
        + what + ". In real-time mode wmobs runs global policies on the JVM engine: the rules,"
        + " allowed lateness, dead letters and every count.";
  }
}
