package io.wmobs.spark;

import java.util.regex.Pattern;
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
 * when a real-time batch ends). The Python engine reads the watermark through a broadcast
 * nested-loop join and runs pandas UDFs, neither allowed: refused here, naming the JVM engine.
 * Substreams run in real-time mode in {@code transformWithState} (the RocksDB state store) from
 * Spark 4.3 only: Spark 4.1 and 4.2 plan that operator by reading its metadata as of the batch
 * being planned, which fails while that batch's offsets-log entry is not yet written ({@code
 * STDS_FAILED_TO_READ_OPERATOR_METADATA}, for every {@code transformWithState} in a real-time
 * batch): refused here, naming the line. Spark itself refuses the rest before a batch is
 * planned: substreams' {@code flatMapGroupsWithState} (in append mode, which real-time mode's
 * update output mode does not take) at {@code start()}, the idle timeout's heartbeat source as
 * the query starts (real-time mode reads only sources that support it, Kafka's).
 */
final class RealTimeMode {
  private RealTimeMode() {}

  /** The Python engine's observation says its engine so ({@code lit("python").alias("engine")}). */
  static final Pattern PYTHON_ENGINE = Pattern.compile("\\bpython AS engine#");

  /** Whether {@code execution} (a {@code StreamExecution}) runs a real-time trigger. */
  static boolean of(Object execution) throws ReflectiveOperationException {
    Object trigger = execution.getClass().getMethod("trigger").invoke(execution);
    return trigger != null && trigger.getClass().getSimpleName().equals("RealTimeTrigger");
  }

  /**
   * What substreams' {@code transformWithState} function says of itself in a plan ({@code
   * KeyedState.Processor}'s {@code toString}).
   */
  static final String KEYED_STATE = "wmobs substreams (transformWithState)";

  /** Why a real-time query cannot run {@code plan}'s time policy, or null if it can. */
  static String refused(Object execution, LogicalPlan plan) throws ReflectiveOperationException {
    if (!of(execution)) {
      return null;
    }
    String tree = plan.treeString();
    if (PYTHON_ENGINE.matcher(tree).find()) {
      return "wmobs TimePolicy in real-time mode (trigger(realTime=...)): this query's policy"
          + " runs on the Python engine, whose plan real-time mode does not allow (a broadcast"
          + " nested-loop join and pandas UDFs): apply it with engine=\"jvm\" (wmobs' Spark"
          + " extension, wmobs.configure_spark). In real-time mode wmobs runs global policies on"
          + " the JVM engine: the rules, allowed lateness, dead letters and every count.";
    }
    String version = org.apache.spark.package$.MODULE$.SPARK_VERSION();
    if (tree.contains(KEYED_STATE) && !keyedStateRuns(version)) {
      return "wmobs TimePolicy in real-time mode (trigger(realTime=...)): substreams"
          + " (substream_by) run in Spark's transformWithState, which Spark "
          + version
          + " cannot plan in a real-time batch (it reads the operator's metadata as of a batch"
          + " whose offsets-log entry real-time mode writes only when the batch ends:"
          + " STDS_FAILED_TO_READ_OPERATOR_METADATA); Spark 4.3 runs it. On this Spark, real-time"
          + " mode runs global policies: drop substream_by, or run the query with micro-batches.";
    }
    return null;
  }

  /** Whether Spark {@code version} plans {@code transformWithState} in a real-time batch. */
  static boolean keyedStateRuns(String version) {
    String[] parts = version.split("[.-]");
    int major = Integer.parseInt(parts[0]);
    int minor = parts.length > 1 ? Integer.parseInt(parts[1]) : 0;
    return major > 4 || (major == 4 && minor >= 3);
  }
}
