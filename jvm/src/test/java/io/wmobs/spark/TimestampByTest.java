package io.wmobs.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import org.junit.jupiter.api.Test;

/** Azure Stream Analytics' {@code TIMESTAMP BY ... OVER ...} read as wmobs' policy function. */
class TimestampByTest {
  private static String rewrite(String sql) {
    return TimestampBy.rewrite(sql);
  }

  @Test
  void aTableWithItsEventTimeAndKeys() {
    assertEquals(
        "SELECT * FROM wmobs_time_policy(TABLE(events), event_time => 'EventTime',"
            + " substream_by => 'deviceId', name => 'events') AS events WHERE x > 1",
        rewrite("SELECT * FROM events TIMESTAMP BY EventTime OVER deviceId WHERE x > 1"));
    assertEquals(
        "select * from wmobs_time_policy(TABLE(db.events), event_time => 'EventTime',"
            + " substream_by => 'a, b', name => 'events') AS events",
        rewrite("select * from db.events timestamp by Events.EventTime over db.events.a, `b`"));
    assertEquals(
        "SELECT * FROM wmobs_time_policy(TABLE(events), event_time => 'event time',"
            + " name => 'e') AS e GROUP BY 1",
        rewrite("SELECT * FROM events AS e TIMESTAMP BY `event time` GROUP BY 1"));
    assertEquals(
        "SELECT * FROM wmobs_time_policy(TABLE(`my events`), event_time => 't',"
            + " name => 'my_events') AS `my events`",
        rewrite("SELECT * FROM `my events` TIMESTAMP BY t"));
  }

  @Test
  void anEventTimeExpressionIsComputedIntoAColumn() {
    assertEquals(
        "SELECT * FROM wmobs_time_policy(TABLE(SELECT *, CAST(ts AS TIMESTAMP) AS"
            + " wmobs_event_time FROM events AS e), event_time => 'wmobs_event_time',"
            + " substream_by => 'id', name => 'e') AS e",
        rewrite("SELECT * FROM events e TIMESTAMP BY CAST(ts AS TIMESTAMP) OVER id"));
  }

  @Test
  void aDottedNameNotQualifiedByTheInputIsAStructsField() {
    // payload.ts: a field of the column payload, computed into a column (not the column ts)
    assertEquals(
        "SELECT * FROM wmobs_time_policy(TABLE(SELECT *, payload.ts AS wmobs_event_time FROM"
            + " events), event_time => 'wmobs_event_time', name => 'events') AS events",
        rewrite("SELECT * FROM events TIMESTAMP BY payload.ts"));
    // an alias hides the table's name, as in Spark
    assertEquals(
        "SELECT * FROM wmobs_time_policy(TABLE(SELECT *, events.t AS wmobs_event_time FROM"
            + " events AS e), event_time => 'wmobs_event_time', name => 'e') AS e",
        rewrite("SELECT * FROM events AS e TIMESTAMP BY events.t"));
    assertEquals(
        "SELECT * FROM wmobs_time_policy(TABLE(events), event_time => 't',"
            + " substream_by => 'id', name => 'e') AS e",
        rewrite("SELECT * FROM events e TIMESTAMP BY E.t OVER `e`.id"));
    assertEquals("t", TimestampBy.column(List.of("t"), List.of()));
    assertNull(TimestampBy.column(List.of("a", "t"), List.of()));
    assertNull(TimestampBy.column(List.of("c", "db", "t"), List.of("db", "events")));
    IllegalArgumentException error =
        assertThrows(
            IllegalArgumentException.class,
            () -> rewrite("SELECT * FROM events TIMESTAMP BY t OVER device.id"));
    assertTrue(error.getMessage().contains("OVER takes the input's columns"), error.getMessage());
  }

  @Test
  void namesAndClausesAsSparkReadsThem() {
    assertEquals( // doubled backquotes, a name that starts with digits
        "SELECT * FROM wmobs_time_policy(TABLE(2024_events), event_time => 'a`b`c',"
            + " name => '2024_events') AS 2024_events",
        rewrite("SELECT * FROM 2024_events TIMESTAMP BY `a``b``c`"));
    assertEquals( // Spark 4's pipe: the event time ends before it
        "FROM wmobs_time_policy(TABLE(events), event_time => 't', name => 'events') AS events"
            + " |> WHERE x > 1",
        rewrite("FROM events TIMESTAMP BY t |> WHERE x > 1"));
    assertEquals( // a pipeline's STREAM(events) is named events, as STREAM events is
        "SELECT * FROM wmobs_time_policy(TABLE(SELECT * FROM STREAM(events)), event_time =>"
            + " 't', name => 'events') AS events",
        rewrite("SELECT * FROM STREAM(events) TIMESTAMP BY t"));
    assertNull(rewrite("SELECT 42L, 1E3, 2BD FROM t"));
    assertEquals( // a backquote in a string is no name's
        "SELECT 'a`' FROM wmobs_time_policy(TABLE(t), event_time => 'e', name => 't') AS t",
        rewrite("SELECT 'a`' FROM t TIMESTAMP BY e"));
  }

  @Test
  void aStreamOfAPipelineAndASubquery() {
    assertEquals(
        "CREATE STREAMING TABLE t AS SELECT * FROM wmobs_time_policy(TABLE(SELECT * FROM"
            + " STREAM events), event_time => 'EventTime', name => 'events') AS events;",
        rewrite(
            "CREATE STREAMING TABLE t AS SELECT * FROM STREAM events TIMESTAMP BY EventTime;"));
    assertEquals(
        "SELECT * FROM wmobs_time_policy(TABLE(SELECT * FROM (SELECT * FROM events)),"
            + " event_time => 't')",
        rewrite("SELECT * FROM (SELECT * FROM events) TIMESTAMP BY t"));
  }

  @Test
  void aJoinOfTwoStreamsEachWithItsOwnTime() {
    assertEquals(
        "SELECT * FROM wmobs_time_policy(TABLE(a), event_time => 't1', name => 'a') AS a JOIN"
            + " wmobs_time_policy(TABLE(b), event_time => 't2', name => 'b') AS b ON a.id = b.id",
        rewrite("SELECT * FROM a TIMESTAMP BY t1 JOIN b TIMESTAMP BY t2 ON a.id = b.id"));
  }

  @Test
  void theSessionsSettingsAreEveryPolicysDefaults() {
    Map<String, String> given = new TreeMap<>();
    given.put("spark.wmobs.sql.late_arrival", " 5 minutes ");
    given.put("spark.wmobs.sql.Distributions", "FALSE");
    Map<String, Object> options = PolicyTable.settings(given);
    assertEquals(Map.of("late_arrival", "5 minutes", "distributions", false), options);
    PolicyOptions policy = PolicyOptions.of(options, Set.of("EventTime"));
    assertEquals(300_000_000L, policy.lateArrivalUs());
    for (String[] bad :
        new String[][] {
          {"spark.wmobs.sql.late_arival", "no option late_arival for every policy"},
          {"spark.wmobs.sql.name", "no option name for every policy"},
          {"spark.wmobs.sql.distributions", "must be true or false, got 'maybe'"},
        }) {
      IllegalArgumentException error =
          assertThrows(
              IllegalArgumentException.class, () -> PolicyTable.settings(Map.of(bad[0], "maybe")));
      assertTrue(error.getMessage().startsWith(bad[0] + ": " + bad[1]), error.getMessage());
    }
  }

  @Test
  void aSettingsQuotesAreNotItsValueAndItsNullTurnsTheOptionOff() {
    Map<String, String> given = new TreeMap<>();
    given.put("spark.wmobs.sql.late_arrival", "'5 minutes'"); // SET keeps the quotes
    given.put("spark.wmobs.sql.out_of_order", " \"1 minute\" ");
    given.put("spark.wmobs.sql.early_arrival", "NULL");
    Map<String, Object> options = PolicyTable.settings(given);
    assertEquals("5 minutes", options.get("late_arrival"));
    assertEquals("1 minute", options.get("out_of_order"));
    assertTrue(options.containsKey("early_arrival"));
    assertNull(options.get("early_arrival"));
    assertNull(PolicyOptions.of(options, Set.of("EventTime")).earlyArrivalUs());
  }

  @Test
  void columnsAreFoundWhateverTheirCaseWhereSparkIgnoresIt() {
    Map<String, Object> options = new TreeMap<>();
    options.put("event_time", "eventtime");
    options.put("substream_by", "deviceid, site");
    PolicyInput.spellAsTheInput(options, java.util.List.of("EventTime", "arrivaltime", "DeviceId"));
    assertEquals("EventTime", options.get("event_time"));
    assertEquals("arrivaltime", options.get("arrival_time")); // the default, as the input has it
    assertEquals("DeviceId,site", options.get("substream_by")); // 'site' left for the error
  }

  @Test
  void wordsInStringsAndCommentsAreLeftAlone() {
    assertNull(
        rewrite("SELECT 'FROM x TIMESTAMP BY y' -- TIMESTAMP BY z\n FROM t /* TIMESTAMP BY */"));
    assertNull(rewrite("SELECT `TIMESTAMP` FROM t"));
    assertEquals(
        "SELECT 'TIMESTAMP BY' FROM wmobs_time_policy(TABLE(t), event_time => 'e', name => 't')"
            + " AS t -- x",
        rewrite("SELECT 'TIMESTAMP BY' FROM t TIMESTAMP BY e -- x"));
  }

  @Test
  void aClauseItCannotReadIsAnErrorNamingTheClause() {
    for (String[] bad :
        new String[][] {
          {"SELECT TIMESTAMP BY x", "follows no table in a FROM clause"},
          {"SELECT * FROM t TIMESTAMP BY", "names no event time"},
          {"SELECT * FROM t TIMESTAMP BY x OVER", "OVER names no key column"},
          {"SELECT * FROM t a b TIMESTAMP BY x", "follows more than a table"},
          {
            "SELECT * FROM db1.events TIMESTAMP BY t JOIN db2.events TIMESTAMP BY t ON 1 = 1",
            "two inputs with TIMESTAMP BY are named 'events'"
          },
          {
            "SELECT * FROM (SELECT * FROM a) TIMESTAMP BY t JOIN (SELECT * FROM b) TIMESTAMP BY t",
            "two inputs with TIMESTAMP BY have no name"
          },
        }) {
      IllegalArgumentException error =
          assertThrows(IllegalArgumentException.class, () -> rewrite(bad[0]), bad[0]);
      assertTrue(error.getMessage().contains(bad[1]), error.getMessage());
      String clause = "TIMESTAMP BY <event time> [OVER";
      assertTrue(error.getMessage().contains(clause), error.getMessage());
    }
  }
}
