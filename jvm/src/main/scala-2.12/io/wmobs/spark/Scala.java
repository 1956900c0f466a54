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
}
