package io.wmobs.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.types.StructType;

/**
 * Substreams called by name: {@code wmobs_substreams(spec, c0, c1, ...)} over every column of
 * a DataFrame, in a {@code select} of its own, is what a Spark Connect client (or SQL) sends;
 * the extension's analyzer rule ({@link PlannedCall.Planner}) replaces it with the plan {@link
 * Substreams#judge} builds, Spark's {@code flatMapGroupsWithState} in it, before Spark checks
 * or runs the query. (A classic session's Python side calls {@code Substreams.judge} itself:
 * the rule exists only in sessions that started with the extension.) The call is a generator
 * with the plan's output as its rows' schema, which is never evaluated.
 *
 * <p>{@code spec}: the substreams' spec ({@link Substreams}) with {@code columns}, the
 * arguments' names, in order.
 */
public final class SubstreamsCall extends PlannedCall implements Serializable {
  private static final long serialVersionUID = 1L;
  static final String NAME = "wmobs_substreams";

  private final String spec;
  private final List<String> names;
  private final List<Expression> columns;

  private SubstreamsCall(String spec, List<String> names, List<Expression> columns) {
    this.spec = spec;
    this.names = List.copyOf(names);
    this.columns = List.copyOf(columns);
  }

  /** The function, built from its arguments (the spec first). */
  static Expression build(List<Expression> arguments) {
    String text = Spec.text(NAME, arguments);
    JsonNode spec = Spec.json(NAME, arguments);
    if (spec.get("columns") == null) {
      throw new IllegalArgumentException("wmobs: " + NAME + "'s spec names its columns");
    }
    List<String> names = new Spec.Reader(NAME, spec).texts("columns");
    List<Expression> columns = Spec.rest(arguments);
    Spec.arity(NAME, columns, names.size());
    Substreams.Settings.parse(text); // an error in the spec now, not when planned
    return new SubstreamsCall(text, names, columns);
  }

  /** The input as {@link Substreams#judge} takes it: the arguments, with their names. */
  private StructType input() {
    StructType schema = new StructType();
    for (int i = 0; i < names.size(); i++) {
      Expression column = columns.get(i);
      schema = schema.add(names.get(i), column.dataType(), column.nullable());
    }
    return schema;
  }

  @Override
  public StructType elementSchema() {
    return Substreams.output(input(), Substreams.Settings.parse(spec));
  }

  @Override
  protected List<Expression> arguments() {
    return columns;
  }

  @Override
  protected Expression withArguments(List<Expression> arguments) {
    return new SubstreamsCall(spec, names, arguments);
  }

  @Override
  protected List<Object> fields() {
    return List.of(spec, names, children());
  }

  @Override
  public String prettyName() {
    return NAME;
  }

  @Override
  LogicalPlan plan(SparkSession spark, LogicalPlan child, List<Attribute> output) {
    List<NamedExpression> projected = new ArrayList<>();
    for (int i = 0; i < names.size(); i++) {
      projected.add(Scala.alias(columns.get(i), names.get(i), null));
    }
    Dataset<Row> staged = Scala.dataset(spark, new Project(Scala.seq(projected), child));
    return as(Scala.plan(Substreams.judge(staged, spec)), output);
  }
}
