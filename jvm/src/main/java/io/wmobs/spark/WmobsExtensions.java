package io.wmobs.spark;

import org.apache.spark.sql.SparkSessionExtensions;
import scala.Tuple3;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * wmobs' Spark extension: {@code spark.sql.extensions=io.wmobs.spark.WmobsExtensions}, with
 * wmobs' JAR on {@code spark.jars}, registers wmobs' functions ({@link Functions}) in every
 * session, Spark Connect's included, SQL's time policy ({@link PolicyTable}), and the analyzer
 * rule that plans the calls by name of substreams and of a whole policy ({@link PlannedCall.Planner}),
 * and Azure Stream Analytics' {@code TIMESTAMP BY ... OVER ...} in SQL ({@link TimestampBy}).
 */
public final class WmobsExtensions extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    for (Functions.Definition function : Functions.ALL) {
      extensions.injectFunction(
          new Tuple3<>(
              function.identifier(),
              function.info(),
              arguments -> Functions.build(function, arguments)));
    }
    extensions.injectTableFunction(
        new Tuple3<>(PolicyTable.identifier(), PolicyTable.info(), PolicyTable::build));
    extensions.injectResolutionRule(PlannedCall.Planner::new);
    extensions.injectOptimizerRule(QueryCheckpoint::new);
    extensions.injectParser(TimestampBy::parser);
    return BoxedUnit.UNIT;
  }
}
