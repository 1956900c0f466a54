package io.wmobs.spark;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.ExpressionInfo;
import org.apache.spark.sql.catalyst.expressions.FunctionTableSubqueryArgumentExpression;
import org.apache.spark.sql.catalyst.expressions.NamedArgumentExpression;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.unsafe.types.UTF8String;
import scala.Option;

/**
 * A time policy from SQL: the table-valued function
 *
 * <pre>
 * SELECT ... FROM wmobs_time_policy(TABLE(events), event_time => 'EventTime',
 *     late_arrival => '5 seconds', substream_by => 'deviceId', name => 'sensors', ...)
 * </pre>
 *
 * over a streaming relation ({@code TABLE(events)} of a streaming view; in a Spark Declarative
 * Pipeline {@code TABLE(SELECT * FROM STREAM events)}), with the Python API's options by name
 * ({@link PolicyOptions}), planned by {@link PolicyPlan} when Spark analyses the query: the
 * same functions, observation, metrics and dead letters as {@code TimePolicy.apply} on the JVM
 * engine.
 */
final class PolicyTable {
  static final String NAME = "wmobs_time_policy";

  /** The settings that give every policy from SQL its defaults: {@code spark.wmobs.sql.<option>}. */
  static final String SETTINGS = "spark.wmobs.sql.";

  /** The options that belong to one query, never to the session. */
  private static final Set<String> PER_QUERY = Set.of("name", "checkpoint_location");

  private PolicyTable() {}

  static FunctionIdentifier identifier() {
    return new FunctionIdentifier(NAME, Option.empty(), Option.empty());
  }

  static ExpressionInfo info() {
    return new ExpressionInfo(
        PolicyTable.class.getName(), null, NAME,
        "_FUNC_(TABLE(input), event_time => 'EventTime', ...) - the input's rows judged by a"
            + " time policy (wmobs): its columns, system_timestamp and the watermark on it.",
        "", "", "", "", "", "", "java_udf");
  }

  /** The plan of a call, from its arguments: the input table, then the options by name. */
  static LogicalPlan build(scala.collection.Seq<Expression> given) {
    List<Expression> arguments = Scala.list(given);
    if (arguments.isEmpty()
        || !(arguments.get(0) instanceof FunctionTableSubqueryArgumentExpression table)) {
      throw new IllegalArgumentException(
          NAME + ": its first argument is the input, TABLE(<a streaming view>) (in a pipeline"
              + " TABLE(SELECT * FROM STREAM <table>)), then the options by name:"
              + " event_time => 'EventTime', ...");
    }
    Map<String, Object> options = new LinkedHashMap<>();
    Map<String, Object> settings = settings(sessionSettings());
    for (Expression argument : arguments.subList(1, arguments.size())) {
      if (!(argument instanceof NamedArgumentExpression named)) {
        throw new IllegalArgumentException(
            NAME + " takes its options by name (event_time => 'EventTime'), not " + argument.sql());
      }
      String key = named.key().toLowerCase(Locale.ROOT);
      if (options.containsKey(key)) {
        throw new IllegalArgumentException(NAME + ": option " + key + " given twice");
      }
      PolicyOptions.known(key); // before its value: the error names it, whatever that is
      options.put(key, value(key, named.value()));
    }
    LogicalPlan input = table.plan();
    if (!input.isStreaming()) {
      throw new IllegalArgumentException(
          NAME + ": the input is not streaming; pass TABLE(<a view of spark.readStream...>), or"
              + " in a pipeline TABLE(SELECT * FROM STREAM <table>)");
    }
    SparkSession spark = SparkSession.active();
    List<String> names = List.of(input.schema().fieldNames());
    Object by = options.containsKey("substream_by") ? options.get("substream_by")
        : settings.get("substream_by");
    if (by == null) { // the session's per-key options are for the policies that have keys
      settings.remove("substream_ttl");
      settings.remove("substream_skew");
    }
    Object idle = options.containsKey("idle_timeout") ? options.get("idle_timeout")
        : settings.get("idle_timeout");
    if (idle == null) { // and its idle check interval for those with an idle timeout
      settings.remove("idle_check_interval");
    }
    Set<String> fromSession = new java.util.HashSet<>(settings.keySet());
    fromSession.removeAll(options.keySet());
    settings.putAll(options); // a call's own options before the session's
    if (!SQLConf.get().caseSensitiveAnalysis()) {
      PolicyInput.spellAsTheInput(settings, names);
    }
    try { // the options' checks, then the input's columns and the dead letters' directory
      PolicyOptions policy = PolicyOptions.of(settings, new java.util.HashSet<>(names));
      return Scala.plan(PolicyPlan.apply(Scala.dataset(spark, input), policy));
    } catch (IllegalArgumentException e) {
      String option = String.valueOf(e.getMessage()).split(":", 2)[0];
      if (fromSession.contains(option)) { // the session's setting, not the call's argument
        throw new IllegalArgumentException(SETTINGS + e.getMessage(), e);
      }
      throw e;
    }
  }

  /**
   * The session's {@code spark.wmobs.sql.*} settings, by name: the session's own, and over them
   * those of the configuration Spark analyses under (a pipeline's flow has its file's {@code
   * SET}s there; a view, only the settings of Spark's own that it captured when made).
   */
  private static Map<String, String> sessionSettings() {
    Map<String, String> found = new java.util.TreeMap<>();
    scala.Option<SparkSession> session = SparkSession.getActiveSession();
    if (session.isDefined()) {
      collect(session.get().sessionState().conf(), found);
    }
    collect(SQLConf.get(), found);
    return found;
  }

  private static void collect(SQLConf conf, Map<String, String> found) {
    scala.collection.Iterator<scala.Tuple2<String, String>> all =
        conf.getAllConfs().iterator();
    while (all.hasNext()) {
      scala.Tuple2<String, String> setting = all.next();
      if (setting._1().startsWith(SETTINGS)) {
        found.put(setting._1(), setting._2());
      }
    }
  }

  /**
   * The options that {@code spark.wmobs.sql.<option>} settings give every policy from SQL (ASA's
   * job-level tolerances; {@code TIMESTAMP BY} gives only the event time and keys): a string
   * each, {@code distributions} a boolean. An unknown option is an error naming the setting.
   */
  static Map<String, Object> settings(Map<String, String> given) {
    Map<String, Object> options = new LinkedHashMap<>();
    for (Map.Entry<String, String> setting : given.entrySet()) {
      String key = setting.getKey().substring(SETTINGS.length()).toLowerCase(Locale.ROOT);
      String value = unquoted(setting.getValue().trim());
      if (!PolicyOptions.DEFAULTS.containsKey(key) || PER_QUERY.contains(key)) {
        List<String> known = new java.util.ArrayList<>(PolicyOptions.DEFAULTS.keySet());
        known.removeAll(PER_QUERY);
        throw new IllegalArgumentException(
            setting.getKey() + ": no option " + key + " for every policy of the session (name"
                + " and checkpoint_location are each query's own); the options are "
                + String.join(", ", known));
      }
      if (key.equals("distributions")) {
        if (!value.equalsIgnoreCase("true") && !value.equalsIgnoreCase("false")) {
          throw new IllegalArgumentException(
              setting.getKey() + ": must be true or false, got '" + value + "'");
        }
        options.put(key, Boolean.parseBoolean(value.toLowerCase(Locale.ROOT)));
      } else if (value.equalsIgnoreCase("null")) {
        options.put(key, null); // as the option's NULL: the rule off, the micro-batch's time
      } else {
        options.put(key, value);
      }
    }
    return options;
  }

  /**
   * A setting's value without one pair of quotes around it: Spark's {@code SET key = value}
   * keeps them ({@code SET spark.wmobs.sql.late_arrival = '5 minutes'}).
   */
  static String unquoted(String value) {
    if (value.length() >= 2
        && (value.charAt(0) == '\'' || value.charAt(0) == '"')
        && value.charAt(value.length() - 1) == value.charAt(0)) {
      return value.substring(1, value.length() - 1).trim();
    }
    return value;
  }

  /** An option's value: a constant string, boolean, null, or an array of strings. */
  private static Object value(String key, Expression value) {
    if (!value.foldable()) {
      throw new IllegalArgumentException(key + ": must be a constant, not " + value.sql());
    }
    Object found = value.eval(null);
    if (found == null || found instanceof Boolean) {
      return found;
    }
    if (found instanceof UTF8String text) {
      String given = text.toString();
      if (key.equals("distributions") // as its session setting takes it: 'true' or 'false'
          && (given.equalsIgnoreCase("true") || given.equalsIgnoreCase("false"))) {
        return Boolean.parseBoolean(given.toLowerCase(Locale.ROOT));
      }
      return given;
    }
    if (found instanceof ArrayData array && value.dataType() instanceof ArrayType type) {
      StringBuilder joined = new StringBuilder();
      for (int i = 0; i < array.numElements(); i++) {
        if (array.isNullAt(i)) {
          throw new IllegalArgumentException(key + ": a NULL in " + value.sql());
        }
        joined.append(i == 0 ? "" : ",").append(array.get(i, type.elementType()));
      }
      return joined.toString();
    }
    throw new IllegalArgumentException(
        key + ": expected a string, not " + value.dataType().simpleString());
  }
}
