package io.wmobs.spark;

import java.util.List;
import java.util.function.Function;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.Expression;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/** What wmobs' Catalyst expressions share: their registration as SQL functions. */
final class Catalyst {
  /** No arguments, or no children. */
  static final Seq<Expression> NONE = seq(List.of());

  private Catalyst() {}

  static <T> Seq<T> seq(List<T> values) {
    return CollectionConverters.asScala(values).toList();
  }

  /**
   * Registers {@code name} in {@code spark}'s function registry (for this session, as
   * {@code spark.udf().register} does): a call with {@code arity} arguments becomes {@code
   * make}'s expression of them, any other call fails at analysis.
   */
  static void register(
      SparkSession spark, String name, int arity, Function<Seq<Expression>, Expression> make) {
    spark
        .sessionState()
        .functionRegistry()
        .createOrReplaceTempFunction(
            name,
            arguments -> {
              if (arguments.size() != arity) {
                throw new IllegalArgumentException(
                    "wmobs: " + name + " takes " + arity + " arguments, not " + arguments.size());
              }
              return make.apply(arguments);
            },
            "scala_udf");
  }
}
