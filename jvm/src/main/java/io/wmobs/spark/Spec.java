package io.wmobs.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.types.StringType;

/**
 * The per-policy spec of a wmobs function: its first argument, a string literal (JSON, or for
 * the batch's times the checkpoint location). One function per kind is registered once per
 * session; what differs between policies travels in the call, so a Spark Connect client calls
 * the same functions by name.
 */
final class Spec {
  static final ObjectMapper JSON = new ObjectMapper();

  private Spec() {}

  /** The text of the first of {@code arguments}, which must be a string literal. */
  static String text(String function, List<Expression> arguments) {
    if (arguments.isEmpty()) {
      throw new IllegalArgumentException("wmobs: " + function + " takes its spec first");
    }
    Expression first = arguments.get(0);
    if (!first.foldable() || !(first.dataType() instanceof StringType)) {
      throw new IllegalArgumentException(
          "wmobs: the first argument of " + function + " must be a string literal (its spec), not "
              + first);
    }
    Object value = first.eval(null);
    if (value == null) {
      throw new IllegalArgumentException("wmobs: the spec of " + function + " is null");
    }
    return value.toString();
  }

  /** The first of {@code arguments} as JSON. */
  static JsonNode json(String function, List<Expression> arguments) {
    String text = text(function, arguments);
    try {
      return JSON.readTree(text);
    } catch (IOException e) {
      throw new UncheckedIOException("wmobs: the spec of " + function + " is not JSON: " + text, e);
    }
  }

  /** {@code arguments} without the spec. */
  static List<Expression> rest(List<Expression> arguments) {
    return arguments.subList(1, arguments.size());
  }

  static void arity(String function, List<Expression> arguments, int... allowed) {
    for (int n : allowed) {
      if (arguments.size() == n) {
        return;
      }
    }
    throw new IllegalArgumentException(
        "wmobs: " + function + " takes " + java.util.Arrays.toString(allowed) + " arguments, not "
            + arguments.size());
  }

  /**
   * {@code spec}, the spec of {@code what}, has every member of {@code required} and none but
   * those and {@code optional}: else an error naming the unknown and the missing ones (a
   * misspelled member is never read as a silent default).
   */
  static void members(String what, JsonNode spec, Set<String> required, Set<String> optional) {
    if (!spec.isObject()) {
      throw new IllegalArgumentException("wmobs: the spec of " + what + " is not an object: " + spec);
    }
    Set<String> unknown = new TreeSet<>();
    spec.fieldNames().forEachRemaining(unknown::add);
    Set<String> missing = new TreeSet<>(required);
    missing.removeAll(unknown);
    unknown.removeAll(required);
    unknown.removeAll(optional);
    if (!unknown.isEmpty() || !missing.isEmpty()) {
      throw new IllegalArgumentException(
          "wmobs: the spec of " + what + " has unknown members " + unknown + " and lacks "
              + missing);
    }
  }

  /** A text member, or null where it is absent or null. */
  static String textOrNull(JsonNode spec, String field) {
    JsonNode node = spec.get(field);
    return node == null || node.isNull() ? null : node.asText();
  }
}
