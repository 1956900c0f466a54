package io.wmobs.spark;

import io.wmobs.spark.SubstreamBeans.In;
import io.wmobs.spark.SubstreamBeans.Out;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.KeyValueGroupedDataset;
import org.apache.spark.sql.SparkSession;

/**
 * Spark 3.5 has no {@code transformWithState}: substreams run in {@code flatMapGroupsWithState}
 * whatever the state store (the Spark 4 copy of this class says when they do not).
 */
final class KeyedState {
  private KeyedState() {}

  static boolean chosen(SparkSession spark) {
    return false;
  }

  static String plannedForAnotherStore(java.util.Set<String> operators) {
    return null; // never planned in transformWithState
  }

  static Dataset<Out> judge(
      KeyValueGroupedDataset<Long, In> grouped, KeyJudge judge, boolean timeouts) {
    throw new UnsupportedOperationException("wmobs: Spark 3.5 has no transformWithState");
  }
}
