package io.wmobs.spark;

import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.plans.logical.Generate;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.rules.Rule;

/**
 * A call by name that stands for a plan: a generator, in a {@code select} of its own, that the
 * extension's analyzer rule ({@link Planner}) replaces with the plan it names
 * ({@link SubstreamsCall}, {@link PolicyCall}) before Spark checks or runs the query. A Spark
 * Connect client sends such calls where it cannot reach the JVM. The generator is never
 * evaluated: without the rule (a session started without the extension) it says so.
 */
abstract class PlannedCall extends WmobsGenerator {
  /** The plan of this call over {@code child}, its output as the call's {@code output}. */
  abstract LogicalPlan plan(SparkSession spark, LogicalPlan child, List<Attribute> output);

  @Override
  protected final Iterator<InternalRow> rows(InternalRow row) {
    throw new IllegalStateException(
        "wmobs: " + prettyName() + " is planned by wmobs' Spark extension, which this session "
            + "lacks: start it with spark.sql.extensions=" + WmobsExtensions.class.getName());
  }

  @Override
  protected final Iterator<InternalRow> finish() {
    return Collections.emptyIterator();
  }

  /** {@code made}'s output as the call's {@code output}: the same names and expression ids. */
  static LogicalPlan as(LogicalPlan made, List<Attribute> output) {
    List<Attribute> columns = Scala.list(made.output());
    List<NamedExpression> renamed = new ArrayList<>();
    for (int i = 0; i < output.size(); i++) {
      Attribute target = output.get(i);
      renamed.add(Scala.alias(columns.get(i), target.name(), target.exprId()));
    }
    return new Project(Scala.seq(renamed), made);
  }

  /**
   * The extension's analyzer rule: each resolved {@code wmobs_substreams} call replaced with
   * its plan, and each {@code wmobs_policy} call ({@link PolicyCall}) with its policy's.
   */
  public static final class Planner extends Rule<LogicalPlan> {
    private final SparkSession spark;

    public Planner(SparkSession spark) {
      this.spark = spark;
    }

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
      List<LogicalPlan> children = Scala.list(plan.children());
      List<LogicalPlan> replaced = new ArrayList<>(children.size());
      boolean changed = false;
      for (LogicalPlan child : children) {
        LogicalPlan after = apply(child);
        changed |= after != child;
        replaced.add(after);
      }
      LogicalPlan node = changed ? plan.withNewChildren(Scala.seq(replaced)) : plan;
      if (node instanceof Generate generate
          && generate.generator() instanceof PlannedCall call
          && generate.resolved()) {
        return call.plan(spark, generate.child(), Scala.list(generate.generatorOutput()));
      }
      return node;
    }
  }
}
