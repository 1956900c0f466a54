package io.wmobs.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GetStructField;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import scala.Option;

/**
 * A whole time policy called by name: {@code wmobs_policy(options, struct(*))} in a {@code
 * select} of its own, what {@code TimePolicy.apply} sends where it may not analyse its input
 * (inside a Spark Declarative Pipelines query function). {@code options}: JSON of the policy's
 * options by their Python and SQL names ({@link PolicyOptions}); the struct: every column of
 * the input, which Spark expands when it analyses the query. The extension's analyzer rule
 * ({@link PlannedCall.Planner}) replaces the call with {@link PolicyPlan}'s plan, as SQL's
 * {@code wmobs_time_policy} is planned; every check on the input's columns happens then, with
 * the same errors. The call is a generator with that plan's output as its rows' schema, which
 * is never evaluated.
 */
public final class PolicyCall extends PlannedCall implements Serializable {
  private static final long serialVersionUID = 1L;
  static final String NAME = "wmobs_policy";

  private final String options;
  private final Expression row;

  private PolicyCall(String options, Expression row) {
    this.options = options;
    this.row = row;
  }

  /** The function, built from its arguments: the options (a JSON literal), the input row. */
  static Expression build(List<Expression> arguments) {
    Spec.arity(NAME, arguments, 2);
    Spec.json(NAME, arguments); // JSON, or an error now
    return new PolicyCall(Spec.text(NAME, arguments), arguments.get(1));
  }

  private StructType input() {
    if (!(row.dataType() instanceof StructType struct)) {
      throw new IllegalArgumentException(
          "wmobs: " + NAME + " takes a struct of the input's columns, not "
              + row.dataType().simpleString());
    }
    return struct;
  }

  /** The options by name, as {@link PolicyOptions#of} takes them. */
  private Map<String, Object> given() {
    JsonNode spec;
    try {
      spec = Spec.JSON.readTree(options);
    } catch (java.io.IOException e) {
      throw new java.io.UncheckedIOException(e);
    }
    Map<String, Object> given = new LinkedHashMap<>();
    spec.fields().forEachRemaining(entry -> {
      JsonNode value = entry.getValue();
      given.put(entry.getKey(), value.isNull() ? null
          : value.isBoolean() ? (Object) value.asBoolean() : value.asText());
    });
    return given;
  }

  @Override
  public StructType elementSchema() {
    StructType schema = new StructType();
    for (StructField field : input().fields()) {
      schema = schema.add(field);
    }
    return schema.add(PolicyPlan.SYSTEM_TIMESTAMP, DataTypes.TimestampType, true);
  }

  @Override
  protected List<Expression> arguments() {
    return List.of(row);
  }

  @Override
  protected Expression withArguments(List<Expression> arguments) {
    return new PolicyCall(options, arguments.get(0));
  }

  @Override
  protected List<Object> fields() {
    return List.of(options, row);
  }

  @Override
  public String prettyName() {
    return NAME;
  }

  @Override
  LogicalPlan plan(SparkSession spark, LogicalPlan child, List<Attribute> output) {
    if (!child.isStreaming()) { // a materialized view's flow, or spark.read in a pipeline
      throw new IllegalArgumentException(
          "apply: expected a streaming DataFrame (spark.readStream...); in a pipeline, read"
              + " the input with spark.readStream in a streaming table or an append flow");
    }
    StructType struct = input();
    List<NamedExpression> columns = new ArrayList<>();
    for (int i = 0; i < struct.fields().length; i++) {
      String name = struct.fields()[i].name();
      columns.add(Scala.alias(new GetStructField(row, i, Option.apply(name)), name, null));
    }
    LogicalPlan input = new Project(Scala.seq(columns), child);
    Map<String, Object> given = given();
    List<String> names = List.of(struct.fieldNames());
    if (!org.apache.spark.sql.internal.SQLConf.get().caseSensitiveAnalysis()) {
      PolicyInput.spellAsTheInput(given, names);
    }
    PolicyOptions policy = PolicyOptions.of(given, new java.util.HashSet<>(names));
    return as(Scala.plan(PolicyPlan.apply(Scala.dataset(spark, input), policy)), output);
  }
}
