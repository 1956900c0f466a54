package io.wmobs.spark;

import java.util.List;
import java.util.function.Function;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.ExpressionInfo;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.types.DataTypes;
import scala.Option;

/**
 * wmobs' SQL functions: a fixed set, registered once per session, each taking the policy's
 * spec as its first argument (a string literal), so that Python calls them by name, also over
 * Spark Connect ({@code F.call_function("wmobs_...", F.lit(spec), ...)}).
 */
public final class Functions {
  /** The extension's version: the Python package checks that it is its own. */
  public static final String VERSION = "wmobs_version";

  /** What {@link #VERSION} returns: the JAR's version, as the wheel that carries it. */
  public static final String RELEASE = release();

  private Functions() {}

  /** One function: its name, what DESCRIBE FUNCTION says of it, and how Catalyst builds it. */
  record Definition(String name, String usage, Class<?> implementation,
      Function<List<Expression>, Expression> builder) {
    FunctionIdentifier identifier() {
      return new FunctionIdentifier(name, Option.empty(), Option.empty());
    }

    ExpressionInfo info() {
      return new ExpressionInfo(
          implementation.getName(), null, name, usage, "", "", "", "", "", "", "java_udf");
    }
  }

  static final List<Definition> ALL =
      List.of(
          new Definition(
              VERSION,
              "_FUNC_() - the version of wmobs' Spark extension.",
              Functions.class,
              arguments -> {
                Spec.arity(VERSION, arguments, 0);
                return Literal.create(RELEASE, DataTypes.StringType);
              }),
          new Definition(
              "wmobs_batch_watermark",
              "_FUNC_(checkpoint) - the running micro-batch's watermark (ms), read from the"
                  + " query's checkpoint; null before the first one.",
              BatchTimes.class,
              arguments -> BatchTimes.build("wmobs_batch_watermark", true, arguments)),
          new Definition(
              "wmobs_batch_timestamp",
              "_FUNC_(checkpoint) - the running micro-batch's timestamp (ms), read from the"
                  + " query's checkpoint.",
              BatchTimes.class,
              arguments -> BatchTimes.build("wmobs_batch_timestamp", false, arguments)),
          new Definition(
              "wmobs_judge",
              "_FUNC_(spec, event_us, arrival_us, watermark_ms, batch_ms) - one field of a row's"
                  + " judgement by a time policy's stateless rules (the spec names it).",
              PolicyRules.class,
              arguments -> PolicyRules.build("wmobs_judge", arguments)),
          new Definition(
              "wmobs_policy_observation",
              "_FUNC_(spec, verdict, ts, event, idle[, delay, lateness][, queue]) - everything a time"
                  + " policy observes in a micro-batch, as JSON.",
              ObservationAggregate.class,
              arguments -> ObservationAggregate.build("wmobs_policy_observation", arguments)),
          new Definition(
              "wmobs_dead_letters",
              "_FUNC_(spec, row) - writes a dropped row to its task's dead-letter file; false.",
              DeadLetterWriter.class,
              arguments -> DeadLetterWriter.build("wmobs_dead_letters", arguments)),
          new Definition(
              SubstreamsCall.NAME,
              "_FUNC_(spec, c0, c1, ...) - every column of a DataFrame judged per key, in Spark's"
                  + " state store (planned by the extension's analyzer rule).",
              SubstreamsCall.class,
              SubstreamsCall::build),
          new Definition(
              PolicyCall.NAME,
              "_FUNC_(options, struct(*)) - every column of a DataFrame judged by a time policy"
                  + " (planned by the extension's analyzer rule, as wmobs_time_policy).",
              PolicyCall.class,
              PolicyCall::build),
          new Definition(
              RowBytes.PACK,
              "_FUNC_(struct) - the struct's bytes, in Spark's row format (substreams carry a"
                  + " row's columns through their state function as one value).",
              RowBytes.class,
              RowBytes::pack),
          new Definition(
              RowBytes.UNPACK,
              "_FUNC_(schema, bytes) - the struct of that schema (JSON) those bytes are.",
              RowBytes.class,
              RowBytes::unpack),
          new Definition(
              RowBytes.PLACE,
              "_FUNC_() - a row's place in its partition's input (unique in a micro-batch, the"
                  + " same when it runs again).",
              RowBytes.class,
              RowBytes::place));

  /**
   * Registers every function in a running session (one that did not start with {@code
   * spark.sql.extensions}) as a temporary function, and {@link QueryCheckpoint} among its
   * optimizations: what {@link WmobsExtensions} does for a new one.
   */
  public static void register(SparkSession spark) {
    for (Definition function : ALL) {
      spark
          .sessionState()
          .functionRegistry()
          .createOrReplaceTempFunction(
              function.name(), arguments -> build(function, arguments), "java_udf");
    }
    spark
        .sessionState()
        .tableFunctionRegistry()
        .createOrReplaceTempFunction(PolicyTable.NAME, PolicyTable::build, "java_udf");
    java.util.List<org.apache.spark.sql.catalyst.rules.Rule<
            org.apache.spark.sql.catalyst.plans.logical.LogicalPlan>>
        rules = new java.util.ArrayList<>(Scala.list(spark.experimental().extraOptimizations()));
    if (rules.stream().noneMatch(rule -> rule instanceof QueryCheckpoint)) {
      rules.add(new QueryCheckpoint(spark));
      spark.experimental().extraOptimizations_$eq(Scala.seq(rules));
    }
  }

  static Expression build(Definition function, scala.collection.Seq<Expression> arguments) {
    return function.builder().apply(Scala.list(arguments));
  }

  private static String release() {
    String version = Functions.class.getPackage().getImplementationVersion();
    return version == null ? "unknown" : version;
  }
}
