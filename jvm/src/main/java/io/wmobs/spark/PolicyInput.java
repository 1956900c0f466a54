package io.wmobs.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;

/**
 * A policy's input checked against its options where Spark analyses the plan ({@link
 * PolicyPlan#apply}): every column an option names exists and has a type the rules take, with
 * an error naming the argument and listing the input's columns, as the Python API's.
 */
final class PolicyInput {
  private PolicyInput() {}

  /**
   * Where Spark resolves names without regard to case (its default, {@code
   * spark.sql.caseSensitive=false}), the options' columns as the input spells them: {@code
   * TIMESTAMP BY eventtime} reads the column {@code EventTime}, and an input whose catalog
   * keeps names in lower case has its {@code arrivaltime} taken for {@code arrival_time}'s
   * default. A name the input lacks in any case is left for {@link #check}'s error.
   */
  static void spellAsTheInput(Map<String, Object> options, List<String> names) {
    for (String key : List.of("event_time", "arrival_time")) {
      Object given = options.containsKey(key) ? options.get(key) : PolicyOptions.DEFAULTS.get(key);
      if (given instanceof String column && !names.contains(column)) {
        String spelled = spelled(column, names);
        if (spelled != null) {
          options.put(key, spelled);
        }
      }
    }
    if (options.get("substream_by") instanceof String keys) {
      List<String> spelled = new ArrayList<>();
      for (String key : keys.split(",")) {
        String name = key.strip();
        String found = names.contains(name) ? name : spelled(name, names);
        spelled.add(found == null ? name : found);
      }
      options.put("substream_by", String.join(",", spelled));
    }
  }

  /** The one name that is {@code column} without case; null for none, or two (ambiguous). */
  private static String spelled(String column, List<String> names) {
    String found = null;
    for (String name : names) {
      if (name.equalsIgnoreCase(column)) {
        if (found != null) {
          return null;
        }
        found = name;
      }
    }
    return found;
  }

  /** The input's columns as the options need them, each error naming the argument. */
  static void check(StructType schema, PolicyOptions options) {
    List<String> names = List.of(schema.fieldNames());
    String listed = String.join(", ", names);
    checkColumn(schema, "event_time", options.eventTime(), listed, true);
    if (options.arrivalTime() != null) {
      checkColumn(schema, "arrival_time", options.arrivalTime(), listed, false);
    }
    for (String key : options.substreamBy() == null ? List.<String>of() : options.substreamBy()) {
      if (!names.contains(key)) {
        throw new IllegalArgumentException(
            "substream_by: column '" + key + "' is not in the input (columns: " + listed + ")");
      }
      if (hasMap(schema.apply(key).dataType())) {
        throw new IllegalArgumentException(
            "substream_by: column '" + key + "' is " + schema.apply(key).dataType().simpleString()
                + "; a key cannot hold a map (equal maps may hash apart)");
      }
    }
    if (names.contains(PolicyPlan.SYSTEM_TIMESTAMP)) {
      throw new IllegalArgumentException(
          "wmobs_time_policy: the input already has a 'system_timestamp' column");
    }
    for (String added : List.of(DeadLetterWriter.RULE, DeadLetterWriter.POLICY,
        DeadLetterWriter.BATCH)) {
      if (options.deadLetter() != null && names.contains(added)) {
        throw new IllegalArgumentException(
            "dead_letter: column '" + added + "' is one that dead letters add (the rule, policy"
                + " and micro-batch of a dropped row): rename or drop it (rows read back from"
                + " dead letters?), or the dead letters would hold it twice");
      }
    }
    for (String name : names) {
      if (PolicyPlan.INTERNAL.contains(name)) {
        throw new IllegalArgumentException(
            "wmobs_time_policy: column '" + name + "' has a name wmobs uses inside the policy;"
                + " rename it");
      }
    }
  }

  private static void checkColumn(
      StructType schema, String argument, String column, String listed, boolean text) {
    if (!List.of(schema.fieldNames()).contains(column)) {
      throw new IllegalArgumentException(
          argument + ": column '" + column + "' is not in the input (columns: " + listed + ")");
    }
    DataType type = schema.apply(column).dataType();
    boolean ok = type instanceof TimestampType || type instanceof TimestampNTZType
        || (text && type instanceof StringType);
    if (!ok) {
      throw new IllegalArgumentException(
          argument + ": column '" + column + "' is " + type.simpleString() + ", expected "
              + (text ? "timestamp or string" : "timestamp")
              + (type instanceof org.apache.spark.sql.types.NumericType
                  ? "; epoch numbers convert with timestamp_millis, timestamp_micros or"
                      + " timestamp_seconds"
                  : ""));
    }
  }

  private static boolean hasMap(DataType type) {
    if (type instanceof MapType) {
      return true;
    }
    if (type instanceof ArrayType array) {
      return hasMap(array.elementType());
    }
    if (type instanceof StructType struct) {
      for (StructField field : struct.fields()) {
        if (hasMap(field.dataType())) {
          return true;
        }
      }
    }
    return false;
  }
}
