package io.wmobs.spark;

import java.util.Iterator;
import java.util.List;
import scala.collection.JavaConverters;
import scala.collection.Seq;
import scala.collection.TraversableOnce;

/**
 * What wmobs' Java code needs from Scala's collections, for Scala 2.12 (Spark 3.5): the same
 * methods as the 2.13 copy of this class, over 2.12's types.
 */
final class Scala {
  private Scala() {}

  static <T> Seq<T> seq(List<T> values) {
    return JavaConverters.asScalaBuffer(values).toList();
  }

  static <T> List<T> list(Seq<T> values) {
    return JavaConverters.seqAsJavaList(values);
  }

  static <T> TraversableOnce<T> once(Iterator<T> values) {
    return JavaConverters.asScalaIterator(values);
  }
  static org.apache.spark.sql.Dataset<org.apache.spark.sql.Row> dataset(
      org.apache.spark.sql.SparkSession spark,
      org.apache.spark.sql.catalyst.plans.logical.LogicalPlan plan) {
    return org.apache.spark.sql.Dataset.ofRows(spark, plan);
  }

  static org.apache.spark.sql.catalyst.plans.logical.LogicalPlan plan(
      org.apache.spark.sql.Dataset<?> dataset) {
    return dataset.logicalPlan();
  }

  /** {@code child AS name}, with {@code exprId} (null: a new one). */
  static org.apache.spark.sql.catalyst.expressions.Alias alias(
      org.apache.spark.sql.catalyst.expressions.Expression child,
      String name,
      org.apache.spark.sql.catalyst.expressions.ExprId exprId) {
    return new org.apache.spark.sql.catalyst.expressions.Alias(
        child,
        name,
        exprId == null ? org.apache.spark.sql.catalyst.expressions.NamedExpression.newExprId() : exprId,
        seq(List.of()),
        scala.Option.empty(),
        seq(List.of()));
  }
}
