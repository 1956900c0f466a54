package io.wmobs.spark;

import java.util.Iterator;
import java.util.List;
import scala.collection.IterableOnce;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * What wmobs' Java code needs from Scala's collections, for Scala 2.13 (Spark 4). The 2.12
 * copy of this class (Spark 3.5) has the same methods over 2.12's types; the base classes in
 * {@code scala-template} name the types as the pom's properties give them; everything else is
 * written once, against {@link java.util.List}.
 */
final class Scala {
  private Scala() {}

  static <T> Seq<T> seq(List<T> values) {
    return CollectionConverters.asScala(values).toList();
  }

  static <T> List<T> list(scala.collection.Seq<T> values) {
    return CollectionConverters.asJava(values);
  }

  static <T> IterableOnce<T> once(Iterator<T> values) {
    return CollectionConverters.asScala(values);
  }
  static org.apache.spark.sql.Dataset<org.apache.spark.sql.Row> dataset(
      org.apache.spark.sql.SparkSession spark,
      org.apache.spark.sql.catalyst.plans.logical.LogicalPlan plan) {
    return org.apache.spark.sql.classic.Dataset.ofRows(
        (org.apache.spark.sql.classic.SparkSession) spark, plan);
  }

  static org.apache.spark.sql.catalyst.plans.logical.LogicalPlan plan(
      org.apache.spark.sql.Dataset<?> dataset) {
    return ((org.apache.spark.sql.classic.Dataset<?>) dataset).logicalPlan();
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
