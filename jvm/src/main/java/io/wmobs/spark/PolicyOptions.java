package io.wmobs.spark;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A time policy's options as SQL's {@code wmobs_time_policy} takes them, by name, with the
 * Python API's names, defaults and errors ({@code TimePolicy} in {@code
 * wmobs/policy/_time_policy.py}, durations as {@code _durations.py} reads them; both answer to
 * {@code tests/reference/durations.json}). Parsed once, on the driver, when the query is
 * analysed; every error names the argument.
 */
record PolicyOptions(
    String eventTime,
    String arrivalTime,
    boolean arrivalDefault,
    Long earlyArrivalUs,
    boolean earlyDrop,
    long lateArrivalUs,
    boolean lateDrop,
    long outOfOrderUs,
    boolean outOfOrderDrop,
    List<String> substreamBy,
    Long substreamTtlUs,
    Long substreamSkewUs,
    Long idleTimeoutUs,
    Long idleCheckIntervalUs,
    boolean distributions,
    String name,
    String deadLetter,
    String checkpoint) {

  /** Every option, and its default (null: none). */
  static final Map<String, Object> DEFAULTS = defaults();

  /** The longest duration a policy takes: 10,000 years ({@code _durations._LONGEST_US}). */
  static final long LONGEST_US = 10_000L * 365 * 86_400_000_000L;

  static final int MAX_NAME = 128;

  private static final Pattern PART = Pattern.compile("\\s*(-?\\d+(?:\\.\\d+)?)\\s*([a-zA-Z]+)\\s*");
  private static final Pattern NAME = Pattern.compile("(?!\\.+$)[A-Za-z0-9_.-]+");
  private static final Map<String, Long> UNITS_US = units();

  private static Map<String, Object> defaults() {
    Map<String, Object> found = new LinkedHashMap<>();
    found.put("event_time", "EventTime");
    found.put("arrival_time", "ArrivalTime");
    found.put("early_arrival", "5 minutes");
    found.put("early_arrival_action", "drop");
    found.put("late_arrival", "5 seconds");
    found.put("late_arrival_action", "adjust");
    found.put("out_of_order", "0 seconds");
    found.put("out_of_order_action", "adjust");
    found.put("substream_by", null);
    found.put("substream_ttl", null);
    found.put("substream_skew", null);
    found.put("idle_timeout", null);
    found.put("idle_check_interval", null);
    found.put("distributions", Boolean.TRUE);
    found.put("name", null);
    found.put("dead_letter", null);
    found.put("checkpoint_location", null);
    return java.util.Collections.unmodifiableMap(found);
  }

  private static Map<String, Long> units() {
    Map<String, Long> units = new LinkedHashMap<>();
    units.put("microsecond", 1L);
    units.put("us", 1L);
    units.put("millisecond", 1_000L);
    units.put("ms", 1_000L);
    units.put("second", 1_000_000L);
    units.put("sec", 1_000_000L);
    units.put("s", 1_000_000L);
    units.put("minute", 60_000_000L);
    units.put("min", 60_000_000L);
    units.put("m", 60_000_000L);
    units.put("hour", 3_600_000_000L);
    units.put("h", 3_600_000_000L);
    units.put("day", 86_400_000_000L);
    units.put("d", 86_400_000_000L);
    units.put("week", 604_800_000_000L);
    return units;
  }

  /** An error naming {@code key} where it is no option. */
  static void known(String key) {
    if (!DEFAULTS.containsKey(key)) {
      throw new IllegalArgumentException(
          "wmobs_time_policy: no option " + key + "; the options are "
              + String.join(", ", DEFAULTS.keySet()));
    }
  }

  /**
   * The options given ({@code given}: name, lower case -> value: a String, Boolean or null),
   * the others at their defaults. {@code columns}: the input's, for {@code arrival_time}'s
   * default (the column {@code ArrivalTime} where the input has one, else the micro-batch's
   * time).
   */
  static PolicyOptions of(Map<String, Object> given, Set<String> columns) {
    given.keySet().forEach(PolicyOptions::known);
    Map<String, Object> all = new LinkedHashMap<>(DEFAULTS);
    all.putAll(given);
    String eventTime = text(all, "event_time", false);
    boolean arrivalDefault = !given.containsKey("arrival_time");
    String arrival = text(all, "arrival_time", true);
    if (arrivalDefault && !columns.contains(arrival)) {
      arrival = null; // the default, and no such column: the micro-batch's time
    }
    String early = text(all, "early_arrival", true);
    List<String> keys = null;
    Object by = all.get("substream_by");
    if (by != null) {
      keys = new ArrayList<>();
      for (String key : text(all, "substream_by", false).split(",")) {
        if (!key.isBlank()) {
          keys.add(key.strip());
        }
      }
      if (keys.isEmpty()) {
        throw new IllegalArgumentException(
            "substream_by: empty; leave it out for one global watermark");
      }
    }
    Long idle = optional(all, "idle_timeout", 1000);
    Long interval = optional(all, "idle_check_interval", 1000);
    if (interval != null && idle == null) {
      throw new IllegalArgumentException("idle_check_interval: only meaningful with idle_timeout");
    }
    Long skew = optional(all, "substream_skew", 0);
    if (skew != null && keys == null) {
      throw new IllegalArgumentException(
          "substream_skew: only meaningful with substream_by (the global policy's watermark is"
              + " the one Spark closes windows by)");
    }
    Object distributions = all.get("distributions");
    if (!(distributions instanceof Boolean)) {
      throw new IllegalArgumentException(
          "distributions: expected true or false, got " + distributions);
    }
    String name = text(all, "name", true);
    if (name == null) {
      name = eventTime.replaceAll("[^A-Za-z0-9_]+", "_");
      name = name.substring(0, Math.min(name.length(), MAX_NAME));
    } else if (!NAME.matcher(name).matches()) {
      throw new IllegalArgumentException(
          "name: use letters, digits, '_', '.' or '-' (not dots alone), got '" + name + "'");
    } else if (name.length() > MAX_NAME) {
      throw new IllegalArgumentException(
          "name: at most " + MAX_NAME + " characters, got " + name.length());
    }
    String checkpoint = text(all, "checkpoint_location", true);
    return new PolicyOptions(
        eventTime,
        arrival,
        arrivalDefault,
        early == null ? null : micros(early, "early_arrival"),
        action(all, "early_arrival_action"),
        micros(text(all, "late_arrival", false), "late_arrival"),
        action(all, "late_arrival_action"),
        micros(text(all, "out_of_order", false), "out_of_order"),
        action(all, "out_of_order_action"),
        keys,
        optional(all, "substream_ttl", 0),
        skew,
        idle,
        interval,
        (Boolean) distributions,
        name,
        text(all, "dead_letter", true),
        checkpoint);
  }

  /** The delay of Spark's watermark on the output: out of order, plus substreams' skew. */
  long watermarkDelayUs() {
    return outOfOrderUs + (substreamSkewUs == null ? 0 : substreamSkewUs);
  }

  private static String text(Map<String, Object> all, String option, boolean nullable) {
    Object value = all.get(option);
    if (value == null) {
      if (nullable) {
        return null;
      }
      throw new IllegalArgumentException(option + ": must not be null");
    }
    if (!(value instanceof String text)) {
      throw new IllegalArgumentException(option + ": expected a string, got " + value);
    }
    if (text.isBlank()) {
      throw new IllegalArgumentException(option + ": empty");
    }
    return text;
  }

  /** An action: true for "drop", false for "adjust". */
  private static boolean action(Map<String, Object> all, String option) {
    String value = text(all, option, false);
    if (!value.equals("drop") && !value.equals("adjust")) {
      throw new IllegalArgumentException(
          option + ": must be 'adjust' or 'drop', got '" + value + "'");
    }
    return value.equals("drop");
  }

  private static Long optional(Map<String, Object> all, String option, long minimum) {
    String value = text(all, option, true);
    if (value == null) {
      return null;
    }
    long micros = micros(value, option);
    if (micros < minimum) {
      throw new IllegalArgumentException(
          option + ": must be at least 1 millisecond, got '" + value + "'");
    }
    return micros;
  }

  /**
   * {@code "5 minutes"}, {@code "1 hour 30 minutes"}, {@code "250 ms"}, {@code "INTERVAL 5
   * SECONDS"} in microseconds; an error naming {@code option} for anything else, a negative
   * duration or one longer than 10,000 years ({@code _durations.to_micros}).
   */
  static long micros(String value, String option) {
    String text = value.strip();
    if (text.toLowerCase(Locale.ROOT).startsWith("interval ")) {
      text = text.substring("interval ".length());
    }
    if (text.isEmpty()) {
      throw new IllegalArgumentException(option + ": empty duration");
    }
    double total = 0;
    int position = 0;
    Matcher part = PART.matcher(text);
    while (position < text.length()) {
      Long unit = null;
      if (part.find(position) && part.start() == position) {
        unit = unit(part.group(2));
      }
      if (unit == null) {
        throw new IllegalArgumentException(
            option + ": '" + value + "' is not a duration like '5 seconds' or '2 minutes'");
      }
      total += Double.parseDouble(part.group(1)) * unit;
      position = part.end();
    }
    if (total > LONGEST_US) {
      throw new IllegalArgumentException(option + ": '" + value + "' is longer than 10,000 years");
    }
    long micros = (long) Math.rint(total); // half to even, as Python's round()
    if (micros < 0) {
      throw new IllegalArgumentException(option + ": must not be negative, got '" + value + "'");
    }
    return micros;
  }

  private static Long unit(String name) {
    String lower = name.toLowerCase(Locale.ROOT);
    Long found = UNITS_US.get(lower);
    if (found == null && lower.endsWith("s")) {
      found = UNITS_US.get(lower.substring(0, lower.length() - 1));
    }
    return found;
  }
}
