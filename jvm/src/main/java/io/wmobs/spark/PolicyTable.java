package io.wmobs.spark;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.ExpressionInfo;
import org.apache.spark.sql.catalyst.expressions.FunctionTableSubqueryArgumentExpression;
import org.apache.spark.sql.catalyst.expressions.NamedArgumentExpression;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.unsafe.types.UTF8String;
import scala.Option;

/**
 * A time policy from SQL: the table-valued function
 *
 * <pre>
 * SELECT ... FROM wmobs_time_policy(TABLE(events), event_time => 'EventTime',
 *     late_arrival => '5 seconds', substream_by => 'deviceId', name => 'sensors', ...)
 * </pre>
 *
 * over a streaming relation ({@code TABLE(events)} of a streaming view; in a Spark Declarative
 * Pipeline {@code TABLE(SELECT * FROM STREAM events)}), with the Python API's options by name
 * ({@link PolicyOptions}), planned by {@link PolicyPlan} when Spark analyses the query: the
 * same functions, observation, metrics and dead letters as {@code TimePolicy.apply} on the JVM
 * engine.
 */
final class PolicyTable {
  static final String NAME = "wmobs_time_policy";

  private PolicyTable() {}

  static FunctionIdentifier identifier() {
    return new FunctionIdentifier(NAME, Option.empty(), Option.empty());
  }

  static ExpressionInfo info() {
    return new ExpressionInfo(
        PolicyTable.class.getName(), null, NAME,
        "_FUNC_(TABLE(input), event_time => 'EventTime', ...) - the input's rows judged by a"
            + " time policy (wmobs): its columns, system_timestamp and the watermark on it.",
        "", "", "", "", "", "", "java_udf");
  }

  /** The plan of a call, from its arguments: the input table, then the options by name. */
  static LogicalPlan build(scala.collection.Seq<Expression> given) {
    List<Expression> arguments = Scala.list(given);
    if (arguments.isEmpty()
        || !(arguments.get(0) instanceof FunctionTableSubqueryArgumentExpression table)) {
      throw new IllegalArgumentException(
          NAME + ": its first argument is the input, TABLE(<a streaming view>) (in a pipeline"
              + " TABLE(SELECT * FROM STREAM <table>)), then the options by name:"
              + " event_time => 'EventTime', ...");
    }
    Map<String, Object> options = new LinkedHashMap<>();
    for (Expression argument : arguments.subList(1, arguments.size())) {
      if (!(argument instanceof NamedArgumentExpression named)) {
        throw new IllegalArgumentException(
            NAME + " takes its options by name (event_time => 'EventTime'), not " + argument.sql());
      }
      String key = named.key().toLowerCase(Locale.ROOT);
      if (options.containsKey(key)) {
        throw new IllegalArgumentException(NAME + ": option " + key + " given twice");
      }
      options.put(key, value(key, named.value()));
    }
    LogicalPlan input = table.plan();
    if (!input.isStreaming()) {
      throw new IllegalArgumentException(
          NAME + ": the input is not streaming; pass TABLE(<a view of spark.readStream...>), or"
              + " in a pipeline TABLE(SELECT * FROM STREAM <table>)");
    }
    SparkSession spark = SparkSession.active();
    Set<String> columns = new java.util.HashSet<>(List.of(input.schema().fieldNames()));
    PolicyOptions policy = PolicyOptions.of(options, columns);
    return Scala.plan(PolicyPlan.apply(Scala.dataset(spark, input), policy));
  }

  /** An option's value: a constant string, boolean, null, or an array of strings. */
  private static Object value(String key, Expression value) {
    if (!value.foldable()) {
      throw new IllegalArgumentException(key + ": must be a constant, not " + value.sql());
    }
    Object found = value.eval(null);
    if (found == null || found instanceof Boolean) {
      return found;
    }
    if (found instanceof UTF8String text) {
      return text.toString();
    }
    if (found instanceof ArrayData array && value.dataType() instanceof ArrayType type) {
      StringBuilder joined = new StringBuilder();
      for (int i = 0; i < array.numElements(); i++) {
        joined.append(i == 0 ? "" : ",").append(array.get(i, type.elementType()));
      }
      return joined.toString();
    }
    throw new IllegalArgumentException(
        key + ": expected a string, not " + value.dataType().simpleString());
  }
}
